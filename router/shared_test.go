package main

// A tenant in a shared server (docs/shared.md): the client logs in as app@t42, the router logs in to
// the owner as the tenant's own account with the tenant's database as the session's start; a client
// that names another database is refused before the owner is asked. A whole-server tenant's login is
// passed on as it came.

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"
)

// clientLogin runs a client's side of the handshake against rt.serve on a pipe and returns the
// router's answer to the login (an OK or ERR packet).
func clientLogin(t *testing.T, rt *Router, user, password, db string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	go rt.serve(server)
	client.SetDeadline(time.Now().Add(5 * time.Second))
	cr := bufio.NewReader(client)
	_, p, err := readPacket(cr)
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseGreeting(p)
	if err != nil {
		t.Fatal(err)
	}
	s1 := sha1.Sum([]byte(password))
	s2 := sha1.Sum(s1[:])
	resp := &response{caps: routerCaps &^ capConnectWithDB, maxPkt: 1 << 24, charset: 33, user: user,
		plugin: nativePassword, auth: nativeAnswer(g.scramble, s1[:], s2[:])}
	if db != "" {
		resp.caps |= capConnectWithDB
		resp.db = db
	}
	if err := writePacket(client, 1, resp.encode()); err != nil {
		t.Fatal(err)
	}
	_, p, err = readPacket(cr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sharedRoute(o *fakeOwner, tenant, password string) controlMsg {
	m := o.route(tenant, 1)
	s1 := sha1.Sum([]byte(password))
	s2 := sha1.Sum(s1[:])
	m.Hash = hex.EncodeToString(s2[:])
	m.OwnerUser, m.Database = tenant+"_app", tenant
	return m
}

func (o *fakeOwner) lastLogin(t *testing.T) *response {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		n := len(o.logins)
		var last *response
		if n > 0 {
			last = o.logins[n-1]
		}
		o.mu.Unlock()
		if last != nil {
			return last
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the owner saw no login")
	return nil
}

func TestASharedTenantLogsInToTheOwnerAsItsOwnUserInItsDatabase(t *testing.T) {
	o := newFakeOwner(t, 1)
	rt := newRouter(time.Second)
	if err := rt.apply(sharedRoute(o, "t42", "pw42")); err != nil {
		t.Fatal(err)
	}
	if p := clientLogin(t, rt, "app@t42", "pw42", ""); len(p) == 0 || p[0] != 0x00 {
		t.Fatalf("login refused: %q", p)
	}
	login := o.lastLogin(t)
	if login.user != "t42_app" || login.db != "t42" || login.caps&capConnectWithDB == 0 {
		t.Fatalf("owner login as %q in %q (caps %#x), want t42_app in t42", login.user, login.db, login.caps)
	}
}

func TestASharedTenantsClientNamingAnotherDatabaseIsRefused(t *testing.T) {
	o := newFakeOwner(t, 1)
	rt := newRouter(time.Second)
	if err := rt.apply(sharedRoute(o, "t42", "pw42")); err != nil {
		t.Fatal(err)
	}
	p := clientLogin(t, rt, "app@t42", "pw42", "t43")
	if len(p) < 3 || p[0] != 0xff || p[1] != 0x14 || p[2] != 0x04 { // 1044 little-endian
		t.Fatalf("a login naming database t43 got %q, want error 1044", p)
	}
	if !strings.Contains(string(p), "t43") {
		t.Fatalf("the error does not name the database: %q", p)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.logins) != 0 {
		t.Fatalf("the owner was asked: %d logins", len(o.logins))
	}
}

func TestASharedTenantsWrongPasswordIsRefused(t *testing.T) {
	o := newFakeOwner(t, 1)
	rt := newRouter(time.Second)
	if err := rt.apply(sharedRoute(o, "t42", "pw42")); err != nil {
		t.Fatal(err)
	}
	if p := clientLogin(t, rt, "app@t42", "wrong", "t42"); len(p) < 3 || p[0] != 0xff || p[1] != 0x15 || p[2] != 0x04 {
		t.Fatalf("a wrong password got %q, want error 1045", p)
	}
}

func TestAWholeServerTenantsLoginIsPassedOnAsItCame(t *testing.T) {
	o := newFakeOwner(t, 1)
	rt := newRouter(time.Second)
	m := sharedRoute(o, "t1", "pw")
	m.OwnerUser, m.Database = "", ""
	if err := rt.apply(m); err != nil {
		t.Fatal(err)
	}
	if p := clientLogin(t, rt, "app@t1", "pw", "shop"); len(p) == 0 || p[0] != 0x00 {
		t.Fatalf("login refused: %q", p)
	}
	login := o.lastLogin(t)
	if login.user != "app" || login.db != "shop" {
		t.Fatalf("owner login as %q in %q, want app in shop", login.user, login.db)
	}
}

func TestAReleaseToANewOwnerKeepsASharedTenantsAccountAndDatabase(t *testing.T) {
	o := newFakeOwner(t, 1)
	rt := newRouter(time.Second)
	rt.token.Store("tok")
	if err := rt.apply(sharedRoute(o, "t42", "pw42")); err != nil {
		t.Fatal(err)
	}
	post(t, rt, rt.serveRelease, "/release?tenant=t42&epoch=2&node=b&host=127.0.0.3&port=4001", "tok")
	r, _ := rt.lookup("t42")
	if r.Epoch != 2 || r.OwnerUser != "t42_app" || r.Database != "t42" {
		t.Fatalf("route after the release: %+v", r)
	}
}

func TestAReleaseToANewOwnerOfAnotherKindTakesItsAccounts(t *testing.T) {
	o := newFakeOwner(t, 1)
	rt := newRouter(time.Second)
	rt.token.Store("tok")
	if err := rt.apply(sharedRoute(o, "t42", "pw42")); err != nil {
		t.Fatal(err)
	}
	// given a server of its own: the owner account is the client's, no start database
	post(t, rt, rt.serveRelease, "/release?tenant=t42&epoch=2&node=b&host=127.0.0.3&port=4001&owner_user=&database=", "tok")
	r, _ := rt.lookup("t42")
	if r.Epoch != 2 || r.OwnerUser != "" || r.Database != "" || r.ownerUser() != "app" {
		t.Fatalf("route after the release: %+v", r)
	}
	// packed into a shared server again
	post(t, rt, rt.serveRelease, "/release?tenant=t42&epoch=3&node=c&host=127.0.0.4&port=4002&owner_user=t42_app&database=t42", "tok")
	r, _ = rt.lookup("t42")
	if r.Epoch != 3 || r.OwnerUser != "t42_app" || r.Database != "t42" {
		t.Fatalf("route after the second release: %+v", r)
	}
}
