package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/registry"
)

// The embedded etcd's own authentication (issue 23), in the etcd registry
// mode with --tls-*, where agents reach etcd: etcd takes a client
// certificate's common name as its user (client-cert-auth), and once auth
// is on a certificate whose name has no user gets nothing. The servers
// bootstrap it, each at every start and idempotently: the root
// user and role, a user with the root role for every server (the names of
// --etcd-initial-cluster and of the cluster's members), then auth on. A
// machine of the etcd registry mode is given a user and a role of its own
// by enrolMachine: it may read the election and its own assignments, and
// write only its own presence key and unit states.

const rootName = "root" // etcd's superuser and its role

// bootstrapEtcdAuth makes the root user and role and a root user for each
// of servers, and turns etcd's authentication on. Every step is
// idempotent, so every server does it at every start; once auth is on,
// only a server whose user exists gets through.
func bootstrapEtcdAuth(ctx context.Context, cli *clientv3.Client, servers []string) error {
	if err := ignoreExists(cli.RoleAdd(ctx, rootName)); err != nil {
		return etcdAuthError(err, "add role root")
	}
	for _, name := range append([]string{rootName}, servers...) {
		if err := ignoreExists(cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true})); err != nil {
			return etcdAuthError(err, "add user "+name)
		}
		if _, err := cli.UserGrantRole(ctx, name, rootName); err != nil {
			return etcdAuthError(err, "grant user "+name+" the root role")
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return etcdAuthError(err, "enable authentication")
	}
	return nil
}

// serverNames are the names of the servers to give etcd users: this
// member's, those of --etcd-initial-cluster, and the cluster's members'.
func serverNames(ctx context.Context, cli *clientv3.Client, self, initial string) ([]string, error) {
	names := []string{self}
	if initial != "" {
		for _, part := range strings.Split(initial, ",") {
			n, _, _ := strings.Cut(part, "=")
			names = append(names, n)
		}
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd authentication: list the members: %w", err)
	}
	for _, m := range ml.Members {
		if m.Name != "" {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// machineRole is the etcd role of machine id in the etcd registry mode.
func machineRole(id string) string { return "flotilla-machine-" + id }

// enrolMachine gives machine id an etcd user of its name and a role that
// may read the engine election and its own assignments, and read and
// write its own presence key and unit states: nothing else (not the
// units, not the tokens, not another machine's keys). A server (one that
// enrols itself with its server certificate: an engine that is no etcd
// member) gets the root role instead. Idempotent; a server's user is
// left as it is.
func enrolMachine(ctx context.Context, cli *clientv3.Client, keys registry.Keys, id string, server bool) error {
	if id == "" || id == rootName {
		return fmt.Errorf("machine name %q cannot be enrolled: it is etcd's superuser", id)
	}
	u, err := cli.UserGet(ctx, id)
	switch {
	case err == nil && slices.Contains(u.Roles, rootName):
		return nil // a server
	case err != nil && !errors.Is(err, rpctypes.ErrUserNotFound):
		return etcdAuthError(err, "look up user "+id)
	case server:
		return bootstrapEtcdAuth(ctx, cli, []string{id})
	}
	role := machineRole(id)
	if err := ignoreExists(cli.RoleAdd(ctx, role)); err != nil {
		return etcdAuthError(err, "add role "+role)
	}
	prefix := func(p string) string { return clientv3.GetPrefixRangeEnd(p) }
	perms := []struct {
		key, end string
		typ      clientv3.PermissionType
	}{
		{keys.Election(), prefix(keys.Election()), clientv3.PermissionType(clientv3.PermRead)},
		{keys.Assignments(id), prefix(keys.Assignments(id)), clientv3.PermissionType(clientv3.PermRead)},
		{keys.Presence(id), "", clientv3.PermissionType(clientv3.PermReadWrite)},
		{keys.MachineStates(id), prefix(keys.MachineStates(id)), clientv3.PermissionType(clientv3.PermReadWrite)},
	}
	for _, p := range perms {
		if _, err := cli.RoleGrantPermission(ctx, role, p.key, p.end, p.typ); err != nil {
			return etcdAuthError(err, "grant role "+role+" "+p.key)
		}
	}
	if err := ignoreExists(cli.UserAddWithOptions(ctx, id, "", &clientv3.UserAddOptions{NoPassword: true})); err != nil {
		return etcdAuthError(err, "add user "+id)
	}
	if _, err := cli.UserGrantRole(ctx, id, role); err != nil {
		return etcdAuthError(err, "grant user "+id+" role "+role)
	}
	return nil
}

// ignoreExists drops the error of adding a user or role that exists.
func ignoreExists[T any](_ T, err error) error {
	if errors.Is(err, rpctypes.ErrUserAlreadyExist) || errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return nil
	}
	return err
}

func etcdAuthError(err error, step string) error {
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) {
		return fmt.Errorf("etcd authentication: %s: %w (this server's certificate names no etcd user with the root role: the servers make one for every member of --etcd-initial-cluster and of the etcd cluster at their start; or enrol this server, POST /v1/machines/NAME/enroll on another server's API with this server's certificate, see docs/security.md)", step, err)
	}
	return fmt.Errorf("etcd authentication: %s: %w", step, err)
}

// startEtcdAuth bootstraps etcd's authentication for the servers, within
// a minute.
func startEtcdAuth(ctx context.Context, cli *clientv3.Client, self, initial string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	names, err := serverNames(ctx, cli, self, initial)
	if err != nil {
		return err
	}
	return bootstrapEtcdAuth(ctx, cli, names)
}
