package main

// A login for a tenant the router has no route for yet waits a little for one (a tenant whose
// creation has just returned may reach this router a moment later), and is refused when none comes.

import (
	"testing"
	"time"
)

func TestALoginWaitsForTheRouteOfATenantJustCreated(t *testing.T) {
	rt := newRouter(time.Second)
	go func() {
		time.Sleep(150 * time.Millisecond)
		rt.apply(controlMsg{route: route{Tenant: "other", Node: "a", Host: "127.0.0.2", Port: 4000, Epoch: 1,
			User: "app"}, Op: "route"}) // another tenant's route wakes the wait; it goes on waiting
		time.Sleep(100 * time.Millisecond)
		rt.apply(controlMsg{route: route{Tenant: "t1", Node: "a", Host: "127.0.0.2", Port: 4001, Epoch: 1,
			User: "app"}, Op: "route"})
	}()
	t0 := time.Now()
	r, st := rt.awaitRoute("t1", 5*time.Second)
	waited := time.Since(t0)
	if r == nil || st == nil || r.Port != 4001 {
		t.Fatalf("no route for t1 after %v: %+v", waited, r)
	}
	if waited < 200*time.Millisecond || waited > 3*time.Second {
		t.Fatalf("waited %v for a route applied after 250ms", waited)
	}
}

func TestALoginForATenantThatNeverComesIsRefusedAfterTheWait(t *testing.T) {
	rt := newRouter(time.Second)
	t0 := time.Now()
	if r, _ := rt.awaitRoute("nope", 200*time.Millisecond); r != nil {
		t.Fatalf("a route for a tenant never routed: %+v", r)
	}
	if waited := time.Since(t0); waited < 200*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("waited %v, expected about 200ms", waited)
	}
	rt.apply(controlMsg{route: route{Tenant: "t1", Node: "a", Host: "127.0.0.2", Port: 4001, Epoch: 1,
		User: "app"}, Op: "route"})
	t0 = time.Now()
	if r, _ := rt.awaitRoute("t1", 5*time.Second); r == nil || time.Since(t0) > 100*time.Millisecond {
		t.Fatalf("a known tenant's route waited %v", time.Since(t0))
	}
}
