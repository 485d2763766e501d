package client

import (
	"context"
	"net/http"

	"github.com/flotilla/flotilla/api"
)

// ACLBootstrap makes the cluster's first admin token. It works once: later
// calls get an *APIError for which IsConflict is true.
func (c *Client) ACLBootstrap(ctx context.Context) (*api.NewToken, error) {
	var t api.NewToken
	if err := c.call(ctx, http.MethodPost, c.url(nil, "v1", "acl", "bootstrap"), struct{}{}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// CreateToken makes a token; its secret is in the answer and nowhere else.
func (c *Client) CreateToken(ctx context.Context, req api.TokenRequest) (*api.NewToken, error) {
	var t api.NewToken
	if err := c.call(ctx, http.MethodPost, c.url(nil, "v1", "acl", "tokens"), req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Tokens lists the cluster's tokens, without their secrets.
func (c *Client) Tokens(ctx context.Context) (*api.TokenList, error) {
	var l api.TokenList
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "acl", "tokens"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// RevokeToken deletes the token with ID id and returns it.
func (c *Client) RevokeToken(ctx context.Context, id string) (*api.Token, error) {
	var t api.Token
	if err := c.call(ctx, http.MethodDelete, c.url(nil, "v1", "acl", "tokens", id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
