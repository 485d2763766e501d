package client_test

import (
	"io"
	"os"
	"testing"

	"context"
	"fmt"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"log"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// endpoint is the API of the daemon the example talks to (a daemon's
// default); TestExample points it at a real one-machine cluster.
var endpoint = "http://127.0.0.1:7480"

// Connect to a daemon, start a unit and list the cluster's units. It
// prints:
//
//	hello.service launched
func Example() {
	ctx := context.Background()
	c, err := client.New(endpoint)
	if err != nil {
		log.Fatal(err)
	}
	hello := "[Service]\nExecStart=/bin/sleep 1000\n"
	if _, err := c.PutUnit(ctx, api.UnitChange{Name: "hello.service", File: hello, DesiredState: "launched"}); err != nil {
		log.Fatal(err)
	}
	units, err := c.Units(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, u := range units.Units {
		fmt.Println(u.Name, u.DesiredState)
	}
}

// TestExample runs Example against a real daemon (embedded etcd, engine,
// agent) and checks what it prints and that the unit runs.
func TestExample(t *testing.T) {
	endpoint = daemontest.Start(t, daemontest.Machine{ID: "m1"}).URL
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	Example()
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	if string(out) != "hello.service launched\n" {
		t.Errorf("Example printed %q, want %q", out, "hello.service launched\n")
	}
	c := newClient(t, endpoint)
	daemontest.WaitUnit(t, c, "hello.service", func(u *api.Unit) bool { return u.State != nil && u.State.Active == "active" })
}
