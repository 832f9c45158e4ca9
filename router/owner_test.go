package main

// A fake owner for the data path's unit tests: a MariaDB server as far as the router's login,
// the session restore and statement re-preparation need one. It records every command.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"testing"
)

type fakeOwner struct {
	ln       net.Listener
	mu       sync.Mutex
	logins   []*response
	commands [][]byte
	nextStmt uint32 // the owner's statement ids start here (+1 each prepare)
	refuse   string // a prepare whose SQL contains this is refused
}

func newFakeOwner(t *testing.T, firstStmt uint32) *fakeOwner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &fakeOwner{ln: ln, nextStmt: firstStmt}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go o.serve(c)
		}
	}()
	return o
}

func (o *fakeOwner) route(tenant string, epoch int64) controlMsg {
	a := o.ln.Addr().(*net.TCPAddr)
	return controlMsg{route: route{Tenant: tenant, Node: "node", Host: "127.0.0.1", Port: a.Port, Epoch: epoch,
		User: "app"}, Op: "route", Hash: "", UpdatedAt: 1}
}

func (o *fakeOwner) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	g := &greeting{version: "10.11.0-MariaDB-fake", connID: 7, charset: 33, status: statusAutocommit,
		caps: routerCaps | capSessionTrack, scramble: bytes.Repeat([]byte{'s'}, 20), plugin: nativePassword}
	if writePacket(c, 0, g.encode()) != nil {
		return
	}
	_, p, err := readPacket(r)
	if err != nil {
		return
	}
	login, err := parseResponse(p)
	if err != nil {
		return
	}
	o.mu.Lock()
	o.logins = append(o.logins, login)
	o.mu.Unlock()
	writePacket(c, 2, []byte{0x00, 0, 0, statusAutocommit, 0, 0, 0})
	for {
		_, p, err := readPacket(r)
		if err != nil || len(p) == 0 {
			return
		}
		o.mu.Lock()
		o.commands = append(o.commands, p)
		o.mu.Unlock()
		switch p[0] {
		case comStmtPrepare:
			o.prepared(c, p[1:])
		case comQuery:
			writePacket(c, 1, []byte{0x00, 0, 0, statusAutocommit, 0, 0, 0})
		}
	}
}

// prepared answers a prepare: OK with the owner's id and the parameter count ('?' in the SQL),
// then a definition per parameter and the EOF that ends them (the login did not ask for
// CLIENT_DEPRECATE_EOF... unless it did: then no EOF).
func (o *fakeOwner) prepared(c net.Conn, sql []byte) {
	if o.refuse != "" && bytes.Contains(sql, []byte(o.refuse)) {
		writePacket(c, 1, errPacket(1146, "42S02", "Table 'gone' doesn't exist"))
		return
	}
	o.mu.Lock()
	o.nextStmt++
	id := o.nextStmt
	deprecate := len(o.logins) > 0 && o.logins[len(o.logins)-1].caps&capDeprecateEOF != 0
	o.mu.Unlock()
	params := bytes.Count(sql, []byte("?"))
	ok := []byte{0x00}
	ok = binary.LittleEndian.AppendUint32(ok, id)
	ok = binary.LittleEndian.AppendUint16(ok, 0) // columns
	ok = binary.LittleEndian.AppendUint16(ok, uint16(params))
	ok = append(ok, 0, 0, 0)
	seq := byte(1)
	writePacket(c, seq, ok)
	for i := 0; i < params; i++ {
		seq++
		writePacket(c, seq, []byte{3, 'd', 'e', 'f'})
	}
	if params > 0 && !deprecate {
		seq++
		writePacket(c, seq, eof(statusAutocommit))
	}
}

func (o *fakeOwner) seen() [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]byte(nil), o.commands...)
}
