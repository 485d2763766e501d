package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestEtcdAuth runs a server of the etcd registry mode with TLS and --acl:
// its embedded etcd has authentication on, the server itself (its
// certificate's name its etcd user, with the root role) still works,
// across a restart that bootstraps again. Machines with agent
// certificates, with etcd's own client: one not enrolled gets nothing; one
// enrolled (with its own certificate, through the API) may write its own
// presence and unit states and read its assignments and the election, and
// nothing else: not another machine's states, not the tokens, not the units.
func TestEtcdAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	p := makePKI(t, "s1", "s2")
	p.agentCert(t, "w1")
	p.agentCert(t, "w2")
	s1 := &node{name: "s1", dir: t.TempDir(), api: freeAddr(t), etcdClient: freeAddr(t), peer: freeAddr(t)}
	s1.args = []string{"daemon", "--name", "s1", "--data-dir", s1.dir, "--api-addr", s1.api, "--grpc-addr", freeAddr(t),
		"--etcd-embed", "--etcd-client-addr", s1.etcdClient, "--etcd-peer-addr", s1.peer, "--registry", "etcd", "--driver", "sim",
		"--tls-ca", p.ca, "--tls-cert", p.cert("s1"), "--tls-key", p.key("s1"), "--acl",
		"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String()}
	s1.start(t)
	t.Cleanup(func() {
		s1.shutdown(t)
		if t.Failed() {
			t.Logf("---- log of s1 ----\n%s", tail(s1.log.String(), 60))
		}
	})
	https := func(who string) *http.Client {
		tc, err := auth.ClientConfig(p.files(who))
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	anon := apiClient{t: t, hc: https("alice")}
	var admin apiClient
	serverWorks := func() {
		t.Helper()
		waitfor.Until(t, 60*time.Second, "s1 to lead and list itself", func() error {
			var ml apiv1.MachineList
			if err := admin.get("https://"+s1.api+"/v1/machines", &ml); err != nil {
				return err
			}
			for _, m := range ml.Machines {
				if m.ID == "s1" && m.Leader {
					return nil
				}
			}
			return errors.New("machines: s1 not listed as the leader")
		})
	}
	waitfor.Until(t, 60*time.Second, "the ACL bootstrap", func() error {
		code, b, err := anon.do("POST", "https://"+s1.api+"/v1/acl/bootstrap", struct{}{})
		if err != nil || code != 200 {
			return errors.New(string(b))
		}
		var nt apiv1.NewToken
		err = json.Unmarshal(b, &nt)
		admin = apiClient{t: t, hc: anon.hc, secret: nt.Secret}
		return err
	})
	serverWorks()

	etcd := func(who string) *clientv3.Client {
		tc, err := auth.ClientConfig(p.files(who))
		if err != nil {
			t.Fatal(err)
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + s1.etcdClient}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	type op struct {
		what string
		do   func(context.Context, *clientv3.Client) error
	}
	put := func(key string) op {
		return op{"put " + key, func(ctx context.Context, c *clientv3.Client) error { _, err := c.Put(ctx, key, "x"); return err }}
	}
	get := func(key string) op { // a prefix when key ends in /
		return op{"get " + key, func(ctx context.Context, c *clientv3.Client) error {
			var opts []clientv3.OpOption
			if strings.HasSuffix(key, "/") {
				opts = append(opts, clientv3.WithPrefix())
			}
			_, err := c.Get(ctx, key, opts...)
			return err
		}}
	}
	token := "/flotilla/acl/tokens/" + strings.Repeat("0", 64)
	check := func(who string, ops []op, allowed bool) {
		t.Helper()
		c := etcd(who)
		for _, o := range ops {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := o.do(ctx, c)
			cancel()
			if allowed && err != nil {
				t.Errorf("%s: %s: %v, want it allowed", who, o.what, err)
			}
			if !allowed && !errors.Is(err, rpctypes.ErrPermissionDenied) {
				t.Errorf("%s: %s: %v, want %v", who, o.what, err, rpctypes.ErrPermissionDenied)
			}
		}
	}
	others := []op{put("/flotilla/states/s1/x.service"), put("/flotilla/presence/s1"), put(token),
		put("/flotilla/units/x.service"), put("/flotilla/assignments/w1/x.service"), put("/flotilla/election/x"),
		get(token), get("/flotilla/acl/"), get("/flotilla/units/"), get("/flotilla/states/s1/"), get("/flotilla/")}
	own := []op{put("/flotilla/states/w1/x.service"), put("/flotilla/presence/w1"), get("/flotilla/presence/w1"),
		get("/flotilla/states/w1/"), get("/flotilla/assignments/w1/"), get("/flotilla/election/")}

	// Not enrolled: nothing, its own keys included.
	check("w1", append(own, others...), false)

	// Another machine's certificate cannot enrol w1; w1's own can, again
	// and again; so can an admin.
	enrol := "https://" + s1.api + "/v1/machines/w1/enroll"
	if code, b, err := (apiClient{t: t, hc: https("w2")}).do("POST", enrol, struct{}{}); err != nil || code != http.StatusUnauthorized {
		t.Errorf("POST %s with w2's certificate = %d %s %v, want 401", enrol, code, b, err)
	}
	for _, c := range []apiClient{{t: t, hc: https("w1")}, {t: t, hc: https("w1")}, admin} {
		code, b, err := c.do("POST", enrol, struct{}{})
		var e apiv1.Enrolment
		if err != nil || code != 200 || json.Unmarshal(b, &e) != nil || e.EtcdUser != "w1" {
			t.Fatalf("POST %s = %d %s %v", enrol, code, b, err)
		}
	}
	check("w1", own, true)
	check("w1", others, false)
	check("w2", append(own, others...), false) // w2's own keys are w2's, and it has no user

	// A server certificate passes etcd's TLS, but s2 is no member: no user,
	// nothing, until it enrols itself as a server (an engine on
	// --etcd-endpoints would), which makes it etcd's root.
	check("s2", append(own, others...), false)
	if code, b, err := (apiClient{t: t, hc: https("s2")}).do("POST", "https://"+s1.api+"/v1/machines/s2/enroll", struct{}{}); err != nil || code != 200 {
		t.Fatalf("s2 enrolling itself = %d %s %v", code, b, err)
	}
	check("s2", append(own, others...), true)

	// A daemon with an agent certificate in the etcd registry mode: not
	// enrolled, etcd refuses it and it says so; once it enrols itself with
	// its certificate it joins, runs a unit placed on it and reports its
	// state, and its API forwards to the leader.
	p.agentCert(t, "w3")
	w3 := &node{name: "w3", dir: t.TempDir(), api: freeAddr(t)}
	w3.args = []string{"daemon", "--name", "w3", "--data-dir", w3.dir, "--api-addr", w3.api,
		"--etcd-endpoints", "https://" + s1.etcdClient, "--registry", "etcd", "--driver", "sim",
		"--tls-ca", p.ca, "--tls-cert", p.cert("w3"), "--tls-key", p.key("w3"), "--acl",
		"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String()}
	w3.start(t)
	t.Cleanup(func() {
		w3.shutdown(t)
		if t.Failed() {
			t.Logf("---- log of w3 ----\n%s", tail(w3.log.String(), 40))
		}
	})
	waitfor.Until(t, 30*time.Second, "w3 to say it is not enrolled", func() error {
		if !strings.Contains(w3.log.String(), "not enrolled") {
			return errors.New("no word of it in w3's log")
		}
		return nil
	})
	var ml apiv1.MachineList
	if err := admin.get("https://"+s1.api+"/v1/machines", &ml); err != nil || len(ml.Machines) != 1 {
		t.Errorf("machines before w3 enrolled = %+v, %v; want s1 alone", ml, err)
	}
	if code, b, err := (apiClient{t: t, hc: https("w3")}).do("POST", "https://"+s1.api+"/v1/machines/w3/enroll", struct{}{}); err != nil || code != 200 {
		t.Fatalf("w3 enrolling itself = %d %s %v", code, b, err)
	}
	unit := apiv1.UnitChange{File: "[Service]\nExecStart=/bin/true\nUser=nobody\n[X-Fleet]\nMachineID=w3\n", DesiredState: "launched"}
	if code, b, err := admin.do("PUT", "https://"+s1.api+"/v1/units/on-w3.service", unit); err != nil || code != 200 {
		t.Fatalf("PUT on-w3.service = %d %s %v", code, b, err)
	}
	active := func(api string) func() error {
		return func() error {
			var sl apiv1.UnitStateList
			if err := admin.get("https://"+api+"/v1/unit-states", &sl); err != nil {
				return err
			}
			for _, st := range sl.States {
				if st.Name == "on-w3.service" && st.Machine == "w3" && st.Active == "active" {
					return nil
				}
			}
			return errors.New("not yet")
		}
	}
	waitfor.Until(t, 60*time.Second, "on-w3.service active on w3, read through w3's API", active(w3.api))

	// The server bootstraps again at its restart, and still works.
	s1.stop(t)
	s1.start(t)
	serverWorks()
	check("w1", own[:1], true)
	check("w1", others[:1], false)
	waitfor.Until(t, 60*time.Second, "w3 back, its unit active", active(s1.api))
	ecli := etcd("s1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ecli.Get(ctx, "/flotilla/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		t.Errorf("the server's certificate could not read etcd: %v", err)
	}
	if st, err := ecli.AuthStatus(ctx); err != nil || !st.Enabled {
		t.Errorf("etcd auth status = %v, %v; want enabled", st, err)
	}
}
