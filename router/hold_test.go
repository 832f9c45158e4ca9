package main

// The router's part of a handover (hold.go): a held connection waits before its next command, one
// inside a transaction drains, the hold answers when all drained (or says how many are busy),
// and ends by release — to the new owner or back to the source — or by itself at its deadline.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// heldRouter is a router with tenant t1 routed to owner A (epoch 1) and a bearer token, and one
// connection of the tenant, between statements.
func heldRouter(t *testing.T) (*Router, *tenantStats, *clientConn) {
	t.Helper()
	rt := newRouter(time.Second)
	rt.apply(controlMsg{Op: "token", Token: "tok"})
	if err := rt.apply(controlMsg{route: route{Tenant: "t1", Node: "a", Host: "127.0.0.2", Port: 4000, Epoch: 1,
		User: "app"}, Op: "route"}); err != nil {
		t.Fatal(err)
	}
	_, st := rt.lookup("t1")
	cn := &clientConn{rt: rt, tenant: "t1", st: st, t: newTracker(true)}
	st.add(cn.t)
	return rt, st, cn
}

func post(t *testing.T, rt *Router, handler func(http.ResponseWriter, *http.Request), url, token string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	handler(w, req)
	doc := map[string]any{}
	json.Unmarshal(w.Body.Bytes(), &doc)
	return w.Code, doc
}

// command is a connection's next command: it passes the hold check (and waits there while held),
// then is sent and answered at once.
func command(cn *clientConn) chan time.Duration {
	done := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		cn.t.passing.Store(true)
		cn.waitHold()
		waited := time.Since(t0)
		cn.t.passing.Store(false)
		done <- waited
	}()
	return done
}

func TestAHoldNeedsTheBearerToken(t *testing.T) {
	rt, st, _ := heldRouter(t)
	if code, _ := post(t, rt, rt.serveHold, "/hold?tenant=t1", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token got %d", code)
	}
	if code, _ := post(t, rt, rt.serveHold, "/hold?tenant=t1", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token got %d", code)
	}
	if st.hold.Load() != nil {
		t.Fatal("held without the token")
	}
}

func TestAConnectionBetweenStatementsWaitsUntilTheReleaseThenGoesToTheNewOwner(t *testing.T) {
	rt, st, cn := heldRouter(t)
	code, doc := post(t, rt, rt.serveHold, "/hold?tenant=t1&drain_ms=200&hold_ms=5000", "tok")
	if code != 200 || doc["held"] != true || doc["drained"] != true || doc["busy"] != 0.0 {
		t.Fatalf("hold answered %d %v", code, doc)
	}
	done := command(cn)
	select {
	case <-done:
		t.Fatal("a command went on while its tenant was held")
	case <-time.After(50 * time.Millisecond):
	}
	_, doc = post(t, rt, rt.serveRelease, "/release?tenant=t1&epoch=2&node=b&host=127.0.0.3&port=4001", "tok")
	if doc["released"] != true || doc["waiting"] != 1.0 {
		t.Fatalf("release answered %v", doc)
	}
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("the released command is still waiting")
	}
	r, _ := rt.lookup("t1")
	if r.Epoch != 2 || r.Host != "127.0.0.3" || r.Port != 4001 || r.Node != "b" || r.User != "app" {
		t.Fatalf("after the release the route is %+v, want the new owner at epoch 2", r)
	}
	if st.heldCommands.Load() != 1 || st.hold.Load() != nil || st.holdExpired.Load() != 0 {
		t.Fatal("the held command is not counted, or the hold is still on")
	}
}

func TestAReleaseWithoutAnOwnerSendsTheHeldCommandsBackToTheSource(t *testing.T) {
	rt, _, cn := heldRouter(t)
	post(t, rt, rt.serveHold, "/hold?tenant=t1&drain_ms=100&hold_ms=5000", "tok")
	done := command(cn)
	time.Sleep(20 * time.Millisecond)
	post(t, rt, rt.serveRelease, "/release?tenant=t1", "tok")
	<-done
	if r, _ := rt.lookup("t1"); r.Epoch != 1 || r.Host != "127.0.0.2" {
		t.Fatalf("an attempt given up moved the route to %+v", r)
	}
	// an owner older than the route in use changes nothing either
	post(t, rt, rt.serveRelease, "/release?tenant=t1&epoch=1&node=b&host=127.0.0.3&port=4001", "tok")
	if r, _ := rt.lookup("t1"); r.Host != "127.0.0.2" {
		t.Fatal("a release with a stale owner moved the route")
	}
}

func TestAHoldNeverReleasedEndsAtItsDeadline(t *testing.T) {
	rt, st, cn := heldRouter(t)
	post(t, rt, rt.serveHold, "/hold?tenant=t1&drain_ms=10&hold_ms=80", "tok")
	waited := <-command(cn)
	if waited < 60*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("the command waited %v for a hold of 80ms", waited)
	}
	if st.holdExpired.Load() != 1 || st.hold.Load() != nil {
		t.Fatal("the expiry is not counted, or the hold is still on")
	}
	if waited := <-command(cn); waited > 50*time.Millisecond {
		t.Fatalf("a command after the expiry waited %v", waited)
	}
}

func TestAConnectionInsideATransactionDrainsAndTheHoldSaysWhoIsStillBusy(t *testing.T) {
	rt, st, cn := heldRouter(t)
	cn.t.inTrans.Store(true) // BEGIN answered: its statements go on until COMMIT
	t0 := time.Now()
	_, doc := post(t, rt, rt.serveHold, "/hold?tenant=t1&drain_ms=60&hold_ms=5000", "tok")
	if doc["drained"] != false || doc["busy"] != 1.0 || doc["connections"] != 1.0 || time.Since(t0) < 50*time.Millisecond {
		t.Fatalf("hold with a transaction open answered %v after %v", doc, time.Since(t0))
	}
	if st.drainTimeouts.Load() != 1 {
		t.Fatal("the drain timeout is not counted")
	}
	if waited := <-command(cn); waited > 50*time.Millisecond {
		t.Fatalf("a statement inside the transaction waited %v: it must drain, not wait", waited)
	}
	// its COMMIT answered: between statements now, the next command waits; the hold drains at once
	cn.t.inTrans.Store(false)
	go func() {
		time.Sleep(30 * time.Millisecond)
		post(t, rt, rt.serveRelease, "/release?tenant=t1", "tok")
	}()
	if waited := <-command(cn); waited < 20*time.Millisecond {
		t.Fatalf("after its COMMIT the connection did not wait for the release (%v)", waited)
	}
	_, doc = post(t, rt, rt.serveHold, "/hold?tenant=t1&drain_ms=500&hold_ms=100", "tok")
	if doc["drained"] != true || doc["busy"] != 0.0 {
		t.Fatalf("a hold over a drained connection answered %v", doc)
	}
}

func TestAHoldOfATenantTheRouterDoesNotKnowHoldsNothing(t *testing.T) {
	rt, _, _ := heldRouter(t)
	_, doc := post(t, rt, rt.serveHold, "/hold?tenant=other", "tok")
	if doc["held"] != false || doc["connections"] != 0.0 {
		t.Fatalf("hold of an unknown tenant answered %v", doc)
	}
}
