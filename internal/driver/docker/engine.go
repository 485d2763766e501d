package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

// startContainer runs a unit anew: it makes sure the image is on the
// machine (pulling it, within PullTimeout, if not), removes the unit's
// previous container (old, or one left under the unit's name), creates a
// container from the unit's current definition and starts it. It returns
// the new container's ID, also when starting it failed.
func (d *Driver) startContainer(ctx context.Context, f *unit.File, old string) (string, error) {
	env, err := service.Environment(&f.Service, d.cfg.Inaccessible...)
	if err != nil {
		return "", err
	}
	if err := checkVolumes(f.Container, d.cfg.Inaccessible); err != nil {
		return "", err
	}
	sp, err := containerSpec(d.cfg.Machine, f, env, d.cfg.Labels)
	if err != nil {
		return "", err
	}
	if err := d.ensureImage(ctx, f.Container.Image); err != nil {
		return "", err
	}
	name := containerName(d.cfg.Machine, f.Name)
	if old != "" {
		if err := d.remove(ctx, old); err != nil {
			return "", fmt.Errorf("remove the previous container %s: %w", shortID(old), err)
		}
	}
	opts := client.ContainerCreateOptions{Config: sp.Config, HostConfig: sp.Host, Name: name}
	cr, err := d.cli.ContainerCreate(ctx, opts)
	if cerrdefs.IsConflict(err) {
		// A container of this unit that the driver did not know of (left
		// by a driver that died between creating and recording it).
		if rerr := d.remove(ctx, name); rerr != nil {
			return "", fmt.Errorf("remove the container left as %s: %w", name, rerr)
		}
		cr, err = d.cli.ContainerCreate(ctx, opts)
	}
	if err != nil {
		return "", fmt.Errorf("create the container: %w", err)
	}
	if _, err := d.cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return cr.ID, fmt.Errorf("start the container: %w", err)
	}
	return cr.ID, nil
}

func (d *Driver) remove(ctx context.Context, id string) error {
	_, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

// ensureImage makes sure the image is on the machine, pulling it if not.
// A missing image that cannot be pulled (no registry reachable, no such
// image, no access) fails at once with the engine's reason.
func (d *Driver) ensureImage(ctx context.Context, image string) error {
	_, err := d.cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		return fmt.Errorf("image %s: %w", image, err)
	}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.PullTimeout)
	defer cancel()
	perr := d.pull(pctx, image)
	if perr == nil {
		return nil
	}
	if errors.Is(pctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		perr = fmt.Errorf("no answer within %s", d.cfg.PullTimeout)
	}
	return fmt.Errorf("image %s is not on this machine and pulling it failed: %v", image, strings.TrimPrefix(perr.Error(), "Error response from daemon: "))
}

func (d *Driver) pull(ctx context.Context, image string) error {
	resp, err := d.cli.ImagePull(ctx, image, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	return resp.Wait(ctx)
}
