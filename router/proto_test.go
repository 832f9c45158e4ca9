package main

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

func TestPacketFramingRoundTripsLengthAndSequence(t *testing.T) {
	var buf bytes.Buffer
	sizes := []int{0, 1, 250, 251, 65535, 65536, 70000}
	for i, n := range sizes {
		if err := writePacket(&buf, byte(i), bytes.Repeat([]byte{byte(i + 1)}, n)); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for i, n := range sizes {
		seq, p, err := readPacket(r)
		if err != nil || seq != byte(i) || len(p) != n || (n > 0 && p[n-1] != byte(i+1)) {
			t.Fatalf("packet %d: seq %d, %d bytes, err %v; want seq %d, %d bytes", i, seq, len(p), err, i, n)
		}
	}
	if _, _, err := readPacket(r); err == nil {
		t.Fatal("read past the last packet")
	}
	if err := writePacket(&buf, 0, make([]byte, maxPacketPayload+1)); !errors.Is(err, errProtocol) {
		t.Fatalf("a payload over 16 MiB - 1 was framed: %v", err)
	}
}

func TestATruncatedPacketIsAnError(t *testing.T) {
	r := bufio.NewReader(bytes.NewReader([]byte{10, 0, 0, 0, 'a', 'b'})) // says 10 bytes, has 2
	if _, _, err := readPacket(r); err == nil {
		t.Fatal("a packet shorter than its header says was read whole")
	}
}

func TestLengthEncodedIntegersAtEveryWidth(t *testing.T) {
	for _, n := range []uint64{0, 250, 251, 65535, 65536, 1<<24 - 1, 1 << 24, 1 << 40} {
		b := appendLenenc([]byte{0xaa}, n)
		got, pos, err := readLenenc(b, 1)
		if err != nil || got != n || pos != len(b) {
			t.Fatalf("%d: read %d at %d (len %d), err %v", n, got, pos, len(b), err)
		}
		if _, _, err := readLenenc(b[:len(b)-1], 1); n >= 251 && err == nil {
			t.Fatalf("%d: a truncated integer was read", n)
		}
	}
	if _, _, err := readLenenc(nil, 0); err == nil {
		t.Fatal("read an integer from nothing")
	}
}

func TestGreetingRoundTrip(t *testing.T) {
	g := &greeting{version: "10.11.6-MariaDB", connID: 42, caps: routerCaps, charset: 45, status: statusAutocommit,
		scramble: []byte("abcdefghijklmnopqrst"), plugin: nativePassword}
	back, err := parseGreeting(g.encode())
	if err != nil {
		t.Fatal(err)
	}
	if back.version != g.version || back.connID != 42 || back.caps != g.caps || back.charset != 45 ||
		back.status != statusAutocommit || !bytes.Equal(back.scramble, g.scramble) || back.plugin != nativePassword {
		t.Fatalf("greeting changed on the way: %+v", back)
	}
	if _, err := parseGreeting(errPacket(1040, "08004", "Too many connections")); err == nil ||
		!bytes.Contains([]byte(err.Error()), []byte("Too many connections")) {
		t.Fatalf("a refusal is not reported with the server's words: %v", err)
	}
	if _, err := parseGreeting([]byte{9, 'x', 0}); !errors.Is(err, errProtocol) {
		t.Fatalf("protocol version 9 accepted: %v", err)
	}
}

func TestHandshakeResponseRoundTrip(t *testing.T) {
	r := &response{caps: routerCaps | capProtocol41, maxPkt: 1 << 24, charset: 33, user: "app@t1",
		auth: bytes.Repeat([]byte{7}, 20), db: "shop", plugin: nativePassword, attrs: []byte{3, 1, 'a', 'b'}}
	back, err := parseResponse(r.encode())
	if err != nil {
		t.Fatal(err)
	}
	if back.caps != r.caps || back.user != r.user || !bytes.Equal(back.auth, r.auth) || back.db != "shop" ||
		back.plugin != nativePassword || !bytes.Equal(back.attrs, r.attrs) || back.maxPkt != r.maxPkt {
		t.Fatalf("response changed on the way: %+v", back)
	}
	old := *r
	old.caps &^= capProtocol41
	if _, err := parseResponse(old.encode()); !errors.Is(err, errProtocol) {
		t.Fatalf("a pre-4.1 client was accepted: %v", err)
	}
	if _, err := parseResponse(make([]byte, 31)); !errors.Is(err, errProtocol) {
		t.Fatalf("a short response was accepted: %v", err)
	}
}

func TestErrorPacketText(t *testing.T) {
	p := errPacket(1045, "28000", "Access denied")
	if p[0] != 0xff || p[1] != 0x15 || p[2] != 0x04 || errText(p) != "Access denied" {
		t.Fatalf("error packet %v reads %q", p, errText(p))
	}
}

func TestRouterAttrJoinsTheClientsAttributes(t *testing.T) {
	pairs := func(block []byte) map[string]string {
		n, pos, err := readLenenc(block, 0)
		if err != nil || pos+int(n) != len(block) {
			t.Fatalf("bad block %x", block)
		}
		out := map[string]string{}
		for pos < len(block) {
			k, p, err := readLenencStr(block, pos)
			if err != nil {
				t.Fatal(err)
			}
			v, p, err := readLenencStr(block, p)
			if err != nil {
				t.Fatal(err)
			}
			out[k], pos = v, p
		}
		return out
	}
	got := pairs(withRouterAttr(nil))
	if len(got) != 1 || got[routerAttr] != "1" {
		t.Fatalf("no client attributes: %v", got)
	}
	kv := append(lenencStr("_client_name"), lenencStr("pymysql")...)
	client := append(appendLenenc(nil, uint64(len(kv))), kv...)
	got = pairs(withRouterAttr(client))
	if got["_client_name"] != "pymysql" || got[routerAttr] != "1" || len(got) != 2 {
		t.Fatalf("client attributes kept: %v", got)
	}
	if got := pairs(withRouterAttr([]byte{0x09, 'x'})); len(got) != 1 { // a malformed block is dropped
		t.Fatalf("malformed: %v", got)
	}
}
