package docker

import (
	"context"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
)

// Objects counts the objects Sandgate made on an engine for one installation.
type Objects struct {
	// Containers are sandbox, warm-pool and snapshot-capture containers, in any state.
	Containers int
	// Images are snapshot images.
	Images int
	// Volumes are the labelled volumes of its containers (those made before installation ids
	// carry no labels and are not counted anywhere).
	Volumes int
}

// Total is the number of objects.
func (o Objects) Total() int { return o.Containers + o.Images + o.Volumes }

// Census is what one Docker engine holds of Sandgate's, by installation.
type Census struct {
	// Engine is the engine's address (unix:///var/run/docker.sock, tcp://…).
	Engine string
	// Installation is the id of the provider that took the census (its own objects are
	// Installations[Installation]).
	Installation string
	// Installations counts the objects labelled managed-by sandgate by installation id; ""
	// holds those without an installation label, made by a Sandgate before installation ids.
	Installations map[string]Objects
}

// Others returns the ids of the other installations that have objects on the engine, and
// whether objects without an installation id are there.
func (c Census) Others() (ids []string, unlabelled bool) {
	for id, o := range c.Installations {
		switch {
		case o.Total() == 0, id == c.Installation:
		case id == "":
			unlabelled = true
		default:
			ids = append(ids, id)
		}
	}
	return ids, unlabelled
}

// Census counts what the engine holds of Sandgate's — containers, snapshot images and
// labelled volumes with the managed-by label, of every profile — by installation id, so
// that a gateway can say when it shares the engine with other installations. It reads
// labels only and changes nothing.
//
// Errors: fault.Provision when the engine does not answer.
func (p *Provider) Census(ctx context.Context) (Census, error) {
	defer p.releaseIfClosed()
	c := Census{Engine: p.cli.DaemonHost(), Installation: p.installation, Installations: map[string]Objects{}}
	if err := p.connect(ctx); err != nil {
		return c, err
	}
	managedBy := filters.NewArgs(filters.Arg("label", LabelManagedBy+"="+ManagedBy))
	containers, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: managedBy})
	if err != nil {
		return c, p.engineErr(err, "listing Sandgate's containers")
	}
	for _, ct := range containers {
		o := c.Installations[ct.Labels[LabelInstallation]]
		o.Containers++
		c.Installations[ct.Labels[LabelInstallation]] = o
	}
	images, err := p.cli.ImageList(ctx, image.ListOptions{All: true, Filters: managedBy})
	if err != nil {
		return c, p.engineErr(err, "listing Sandgate's images")
	}
	for _, im := range images {
		o := c.Installations[im.Labels[LabelInstallation]]
		o.Images++
		c.Installations[im.Labels[LabelInstallation]] = o
	}
	vols, err := p.cli.VolumeList(ctx, volume.ListOptions{Filters: managedBy})
	if err != nil {
		return c, p.engineErr(err, "listing Sandgate's volumes")
	}
	for _, v := range vols.Volumes {
		o := c.Installations[v.Labels[LabelInstallation]]
		o.Volumes++
		c.Installations[v.Labels[LabelInstallation]] = o
	}
	return c, nil
}
