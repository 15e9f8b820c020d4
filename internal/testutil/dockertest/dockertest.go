// Package dockertest keeps the tests that make Docker sandboxes from leaving them behind.
//
// Every container, volume and snapshot image Sandgate makes carries its installation id
// (docker.LabelInstallation; one per database, so one per test gateway or test provider), so
// a test removes exactly what its own installation made — after the gateways and providers it
// started are gone, also when it killed one on purpose and nothing destroyed its sessions —
// and never another test's, another test process's or a developer's sandboxes on the same
// engine. A package's TestMain then checks that nothing of its tests' installations is left:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(dockertest.CheckAfter(m)) }
//
// Register records an installation for that check; Remove removes its objects; Track does
// both for a test. Without a reachable engine, Remove and the check do nothing.
package dockertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/loopdisk"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

var (
	mu       sync.Mutex
	recorded = map[string]bool{} // installations whose objects this process makes
)

// Register records installation as one whose objects this test process makes, for
// CheckAfter. Ids that are not installation ids are ignored.
func Register(installation string) {
	if !providers.ValidInstallationID(installation) {
		return
	}
	mu.Lock()
	recorded[installation] = true
	mu.Unlock()
}

// Track registers installation and removes its objects (Remove) when t ends. t's clean-ups
// run last-registered first, so call it before starting what makes the objects (a gateway, a
// provider): the removal then runs after they are closed.
func Track(t testing.TB, installation string) {
	t.Helper()
	Register(installation)
	t.Cleanup(func() { Remove(t, installation) })
}

// Remove force-removes what installation has on the engine of the environment (DOCKER_HOST,
// else the local socket): its containers with their volumes, then its remaining volumes and
// snapshot images, and its folders under the default sandboxd socket folder and the default
// state folder (docker.DefaultSocketDir, docker.DefaultStateDir; workspace disks detached).
// It logs what it removed and what failed to t; an invalid id removes nothing.
func Remove(t testing.TB, installation string) {
	t.Helper()
	if !providers.ValidInstallationID(installation) {
		t.Errorf("dockertest: %q is not an installation id", installation)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	removed, err := remove(ctx, installation)
	if len(removed) > 0 {
		t.Logf("dockertest: removed what installation %s left on the engine: %s", installation, strings.Join(removed, ", "))
	}
	if err != nil {
		t.Errorf("dockertest: removing the objects of installation %s: %v", installation, err)
	}
}

// CheckAfter wraps m for a TestMain: its Run runs the tests, then lists the objects of every
// Registered installation still on the engine. Any left is a failure: they are printed to
// stderr, removed, and Run returns 1 (the tests' own code when that is not 0). The
// installations' host folders (socket folders, disks) are removed in any case.
func CheckAfter(m *testing.M) interface{ Run() int } { return checked{m} }

type checked struct{ m *testing.M }

func (c checked) Run() int {
	code := c.m.Run()
	mu.Lock()
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range recorded {
			if !yield(id) {
				return
			}
		}
	})
	mu.Unlock()
	if len(ids) == 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var left []string
	defer func() {
		for _, id := range ids {
			if err := removeHost(id); err != nil {
				fmt.Fprintf(os.Stderr, "dockertest: removing the host folders of installation %s: %v\n", id, err)
			}
		}
	}()
	for _, id := range ids {
		objs, err := list(ctx, id)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dockertest: listing the objects of installation %s: %v\n", id, err)
			continue
		}
		if len(objs) == 0 {
			continue
		}
		left = append(left, fmt.Sprintf("installation %s: %s", id, strings.Join(objs, ", ")))
		if _, err := remove(ctx, id); err != nil {
			fmt.Fprintf(os.Stderr, "dockertest: removing them: %v\n", err)
		}
	}
	if len(left) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "FAIL: the tests left Docker objects of their installations behind (removed now):\n  %s\n", strings.Join(left, "\n  "))
	if code == 0 {
		code = 1
	}
	return code
}

// engine returns a client of the environment's engine, or nil when none answers.
func engine(ctx context.Context) *client.Client {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		_ = cli.Close()
		return nil
	}
	return cli
}

func byInstallation(installation string) filters.Args {
	return filters.NewArgs(filters.Arg("label", docker.LabelInstallation+"="+installation))
}

// list names the containers, volumes and images of installation on the engine.
func list(ctx context.Context, installation string) ([]string, error) {
	cli := engine(ctx)
	if cli == nil {
		return nil, nil
	}
	defer cli.Close()
	var out []string
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: byInstallation(installation)})
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		out = append(out, "container "+strings.TrimPrefix(firstName(c.Names), "/")+" ("+c.Labels[docker.LabelProfile]+", "+c.State+")")
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: byInstallation(installation)})
	if err != nil {
		return nil, err
	}
	for _, v := range vs.Volumes {
		out = append(out, "volume "+v.Name)
	}
	is, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: byInstallation(installation)})
	if err != nil {
		return nil, err
	}
	for _, i := range is {
		out = append(out, "image "+strings.Join(append(slices.Clone(i.RepoTags), i.ID), " "))
	}
	return out, nil
}

// remove removes the objects of installation and returns what it removed.
func remove(ctx context.Context, installation string) ([]string, error) {
	var removed []string
	var errs []error
	if cli := engine(ctx); cli != nil {
		defer cli.Close()
		by := byInstallation(installation)
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: by})
		errs = append(errs, err)
		for _, c := range cs {
			err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			if err == nil {
				removed = append(removed, "container "+strings.TrimPrefix(firstName(c.Names), "/"))
			} else if !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) { // conflict: being removed already
				errs = append(errs, err)
			}
		}
		vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: by})
		errs = append(errs, err)
		for _, v := range vs.Volumes {
			if err := cli.VolumeRemove(ctx, v.Name, true); err == nil {
				removed = append(removed, "volume "+v.Name)
			} else if !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
		is, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: by})
		errs = append(errs, err)
		for _, i := range is {
			if _, err := cli.ImageRemove(ctx, i.ID, image.RemoveOptions{Force: true, PruneChildren: true}); err == nil {
				removed = append(removed, "image "+i.ID)
			} else if !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, removeHost(installation))
	return removed, errors.Join(errs...)
}

// removeHost removes what the provider keeps for installation on the host in its default
// folders: socket folders, and workspace disks (detached first).
func removeHost(installation string) error {
	var errs []error
	imgs, _ := filepath.Glob(filepath.Join(docker.DefaultStateDir, "disks", installation, "*.img"))
	for _, img := range imgs {
		errs = append(errs, loopdisk.Remove(img, strings.TrimSuffix(img, ".img")+".dev"))
	}
	for _, dir := range []string{filepath.Join(docker.DefaultSocketDir(), installation), filepath.Join(docker.DefaultStateDir, "disks", installation)} {
		if _, err := os.Stat(dir); err == nil {
			errs = append(errs, os.RemoveAll(dir))
		}
	}
	return errors.Join(errs...)
}

func firstName(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
