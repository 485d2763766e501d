package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/flotilla/flotilla/api"
)

// BatchOptions are how BatchWith writes.
type BatchOptions struct {
	// Replace replaces units whose file differs (ReplaceBatch).
	Replace bool
	// CheckIndex, when set, has the server refuse the batch (409, nothing
	// changed) if any of its units changed since a plan gave the index.
	CheckIndex *int64
}

func (o BatchOptions) query() url.Values {
	q := url.Values{}
	if o.Replace {
		q.Set("replace", "true")
	}
	if o.CheckIndex != nil {
		q.Set("check-index", strconv.FormatInt(*o.CheckIndex, 10))
	}
	return q
}

// BatchWith is Batch with options.
func (c *Client) BatchWith(ctx context.Context, b api.Batch, o BatchOptions) (*api.BatchResult, error) {
	var r api.BatchResult
	if err := c.call(ctx, http.MethodPost, c.url(o.query(), "v1", "batch"), b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Plan returns what BatchWith(b) would do, changing nothing (POST
// /v1/plan). Its Index is the check index to write with.
func (c *Client) Plan(ctx context.Context, b api.Batch, replace bool) (*api.Plan, error) {
	var p api.Plan
	if err := c.call(ctx, http.MethodPost, c.url(BatchOptions{Replace: replace}.query(), "v1", "plan"), b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Versions returns the versions of a unit's file (its template's for an
// instance), oldest first, with each file when files is set.
func (c *Client) Versions(ctx context.Context, name string, files bool) (*api.VersionList, error) {
	var q url.Values
	if files {
		q = url.Values{"files": {"true"}}
	}
	var l api.VersionList
	if err := c.call(ctx, http.MethodGet, c.url(q, "v1", "units", name, "versions"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Version returns one version of a unit's file, with the file.
func (c *Client) Version(ctx context.Context, name string, version int) (*api.Version, error) {
	var v api.Version
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "units", name, "versions", strconv.Itoa(version)), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Revert gives a unit the file of one of its versions (0: the newest
// earlier one with another file), making a new version, and returns its
// versions.
func (c *Client) Revert(ctx context.Context, name string, version int, checkIndex *int64, update map[string]string) (*api.VersionList, error) {
	var l api.VersionList
	u := c.url(BatchOptions{CheckIndex: checkIndex}.query(), "v1", "units", name, "revert")
	if err := c.call(ctx, http.MethodPost, u, api.Revert{Version: version, Update: update}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Tag names a version of a unit, which keeps it; tag "" removes its tag.
func (c *Client) Tag(ctx context.Context, name string, version int, tag string) (*api.VersionList, error) {
	var l api.VersionList
	u := c.url(nil, "v1", "units", name, "versions", strconv.Itoa(version), "tag")
	var err error
	if tag == "" {
		err = c.call(ctx, http.MethodDelete, u, nil, &l)
	} else {
		err = c.call(ctx, http.MethodPut, u, api.Tag{Tag: tag}, &l)
	}
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// VersionsConfig returns how many versions of each unit the cluster keeps.
func (c *Client) VersionsConfig(ctx context.Context) (*api.VersionsConfig, error) {
	var v api.VersionsConfig
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "config", "versions"), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// SetVersionsConfig sets how many versions of each unit the cluster keeps.
func (c *Client) SetVersionsConfig(ctx context.Context, v api.VersionsConfig) (*api.VersionsConfig, error) {
	var out api.VersionsConfig
	if err := c.call(ctx, http.MethodPut, c.url(nil, "v1", "config", "versions"), v, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Deployments returns the latest deployment of each template.
func (c *Client) Deployments(ctx context.Context) (*api.DeploymentList, error) {
	var l api.DeploymentList
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "deployments"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Deployment returns a template's latest deployment.
func (c *Client) Deployment(ctx context.Context, template string) (*api.Deployment, error) {
	var d api.Deployment
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "deployments", template), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// ControlDeployment promotes, pauses, resumes or aborts a template's
// deployment (action "promote", "pause", "resume" or "abort").
func (c *Client) ControlDeployment(ctx context.Context, template, action string) (*api.Deployment, error) {
	var d api.Deployment
	if err := c.call(ctx, http.MethodPost, c.url(nil, "v1", "deployments", template, action), struct{}{}, &d); err != nil {
		return nil, err
	}
	return &d, nil
}
