package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// reportNeighbours says when a Docker engine of the gateway's profiles also holds other
// Sandgate installations' objects, or objects of a Sandgate before installation ids: a log
// line per engine (a warning in dev, where sharing is rarely meant) and the lines for dev's
// banner, which it returns. The gateway never sweeps, claims or attaches those; this only
// tells. An engine that does not answer within 5 s is left out.
func reportNeighbours(ctx context.Context, g *gateway.Gateway, log *slog.Logger, dev bool) []string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	censuses, err := g.EngineCensus(ctx)
	if err != nil {
		log.Debug("counting the Docker engines' objects by installation failed", "err", err)
	}
	level := slog.LevelInfo
	if dev {
		level = slog.LevelWarn
	}
	var lines []string
	for _, c := range censuses {
		others, unlabelled := c.Others()
		if len(others) == 0 && !unlabelled {
			continue
		}
		slices.Sort(others)
		var parts []string
		for _, id := range others {
			parts = append(parts, id+": "+describe(c.Installations[id]))
		}
		attrs := []any{"engine", c.Engine, "installation", c.Installation, "other_installations", parts}
		if unlabelled {
			attrs = append(attrs, "without_installation_id", describe(c.Installations[""]))
		}
		log.Log(ctx, level, "the Docker engine also holds other Sandgate installations' objects; this gateway never sweeps, claims or attaches them", attrs...)
		line := fmt.Sprintf("shared engine: %s also holds", c.Engine)
		if len(others) > 0 {
			line += fmt.Sprintf(" %d other installation(s) (%s)", len(others), strings.Join(parts, "; "))
		}
		if unlabelled {
			if len(others) > 0 {
				line += " and"
			}
			line += " " + describe(c.Installations[""]) + " of a Sandgate without installation ids"
		}
		lines = append(lines, line+"; this gateway leaves them alone")
	}
	return lines
}

// describe says what o counts: "3 containers, 1 image".
func describe(o docker.Objects) string {
	var parts []string
	for _, n := range []struct {
		count int
		name  string
	}{{o.Containers, "container"}, {o.Images, "image"}, {o.Volumes, "volume"}} {
		switch {
		case n.count == 1:
			parts = append(parts, "1 "+n.name)
		case n.count > 1:
			parts = append(parts, fmt.Sprintf("%d %ss", n.count, n.name))
		}
	}
	return strings.Join(parts, ", ")
}
