// MySQL/MariaDB wire protocol: the few pieces a router needs (packet framing,
// the initial handshake, the handshake response, OK/ERR, mysql_native_password).
package main

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	capLongPassword     = 1 << 0
	capFoundRows        = 1 << 1
	capLongFlag         = 1 << 2
	capConnectWithDB    = 1 << 3
	capODBC             = 1 << 6
	capLocalFiles       = 1 << 7
	capIgnoreSpace      = 1 << 8
	capProtocol41       = 1 << 9
	capInteractive      = 1 << 10
	capSSL              = 1 << 11
	capTransactions     = 1 << 13
	capSecureConnection = 1 << 15
	capMultiStatements  = 1 << 16
	capMultiResults     = 1 << 17
	capPSMultiResults   = 1 << 18
	capPluginAuth       = 1 << 19
	capConnectAttrs     = 1 << 20
	capPluginAuthLenenc = 1 << 21
	capSessionTrack     = 1 << 23
	capDeprecateEOF     = 1 << 24
	nativePassword      = "mysql_native_password"
	statusInTrans       = 1 << 0
	statusAutocommit    = 1 << 1
	maxPacketPayload    = 1<<24 - 1
)

// What the router offers a client. Bit 0 set: clients treat the router as MySQL-compatible and ask
// for no MariaDB extended capabilities (bulk, progress, metadata cache), which a byte pipe need not
// understand. No COMPRESS (the router reads packet headers); SSL is added when TLS is configured.
const routerCaps = capLongPassword | capFoundRows | capLongFlag | capConnectWithDB | capODBC | capLocalFiles |
	capIgnoreSpace | capProtocol41 | capInteractive | capTransactions | capSecureConnection | capMultiStatements |
	capMultiResults | capPSMultiResults | capPluginAuth | capConnectAttrs | capPluginAuthLenenc | capSessionTrack |
	capDeprecateEOF

var errProtocol = errors.New("protocol error")

// readPacket reads one packet (header and payload). Payloads of 16 MiB - 1 continue in the next
// packet; the handshake never needs that, the forwarding path does not reassemble.
func readPacket(r *bufio.Reader) (seq byte, payload []byte, err error) {
	var h [4]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return h[3], payload, err
}

func writePacket(w io.Writer, seq byte, payload []byte) error {
	if len(payload) > maxPacketPayload {
		return fmt.Errorf("%w: packet of %d bytes during the handshake", errProtocol, len(payload))
	}
	buf := make([]byte, 4+len(payload))
	buf[0], buf[1], buf[2], buf[3] = byte(len(payload)), byte(len(payload)>>8), byte(len(payload)>>16), seq
	copy(buf[4:], payload)
	_, err := w.Write(buf)
	return err
}

func readNul(b []byte, pos int) (string, int, error) {
	i := bytes.IndexByte(b[pos:], 0)
	if i < 0 {
		return "", pos, errProtocol
	}
	return string(b[pos : pos+i]), pos + i + 1, nil
}

func readLenenc(b []byte, pos int) (uint64, int, error) {
	if pos >= len(b) {
		return 0, pos, errProtocol
	}
	switch c := b[pos]; {
	case c < 0xfb:
		return uint64(c), pos + 1, nil
	case c == 0xfc && pos+3 <= len(b):
		return uint64(binary.LittleEndian.Uint16(b[pos+1:])), pos + 3, nil
	case c == 0xfd && pos+4 <= len(b):
		return uint64(b[pos+1]) | uint64(b[pos+2])<<8 | uint64(b[pos+3])<<16, pos + 4, nil
	case c == 0xfe && pos+9 <= len(b):
		return binary.LittleEndian.Uint64(b[pos+1:]), pos + 9, nil
	}
	return 0, pos, errProtocol
}

// routerAttr marks the router's own logins to an owner (performance_schema.session_connect_attrs): a shared
// tenant's fence ends every idle session of the tenant before the flip except these, which the router holds
// and moves to the new owner itself.
const routerAttr = "_slacker_router"

// withRouterAttr is a connection-attributes block (its lenenc length, then lenenc key/value pairs): the
// client's own pairs, if it sent a well-formed block, and routerAttr=1.
func withRouterAttr(attrs []byte) []byte {
	var pairs []byte
	if len(attrs) > 0 {
		if n, pos, err := readLenenc(attrs, 0); err == nil && pos+int(n) <= len(attrs) {
			pairs = append(pairs, attrs[pos:pos+int(n)]...)
		}
	}
	pairs = append(appendLenenc(pairs, uint64(len(routerAttr))), routerAttr...)
	pairs = append(appendLenenc(pairs, 1), '1')
	return append(appendLenenc(nil, uint64(len(pairs))), pairs...)
}

func appendLenenc(b []byte, n uint64) []byte {
	switch {
	case n < 0xfb:
		return append(b, byte(n))
	case n < 1<<16:
		return append(b, 0xfc, byte(n), byte(n>>8))
	case n < 1<<24:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	}
	b = append(b, 0xfe)
	return binary.LittleEndian.AppendUint64(b, n)
}

// greeting is a server's initial handshake packet.
type greeting struct {
	version  string
	connID   uint32
	caps     uint32
	charset  byte
	status   uint16
	scramble []byte
	plugin   string
}

func (g *greeting) encode() []byte {
	b := []byte{10}
	b = append(b, g.version...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, g.connID)
	b = append(b, g.scramble[:8]...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(g.caps))
	b = append(b, g.charset)
	b = binary.LittleEndian.AppendUint16(b, g.status)
	b = binary.LittleEndian.AppendUint16(b, uint16(g.caps>>16))
	b = append(b, byte(len(g.scramble)+1))
	b = append(b, make([]byte, 10)...)
	b = append(b, g.scramble[8:]...)
	b = append(b, 0)
	b = append(b, g.plugin...)
	return append(b, 0)
}

func parseGreeting(p []byte) (*greeting, error) {
	if len(p) < 1 {
		return nil, errProtocol
	}
	if p[0] == 0xff {
		return nil, fmt.Errorf("server refused the connection: %s", errText(p))
	}
	if p[0] != 10 {
		return nil, fmt.Errorf("%w: handshake version %d", errProtocol, p[0])
	}
	g := &greeting{}
	var err error
	pos := 1
	if g.version, pos, err = readNul(p, pos); err != nil {
		return nil, err
	}
	if pos+4+8+1+2 > len(p) {
		return nil, errProtocol
	}
	g.connID = binary.LittleEndian.Uint32(p[pos:])
	pos += 4
	g.scramble = append([]byte{}, p[pos:pos+8]...)
	pos += 9
	g.caps = uint32(binary.LittleEndian.Uint16(p[pos:]))
	pos += 2
	if pos+1+2+2+1+10 <= len(p) {
		g.charset = p[pos]
		g.status = binary.LittleEndian.Uint16(p[pos+1:])
		g.caps |= uint32(binary.LittleEndian.Uint16(p[pos+3:])) << 16
		authLen := int(p[pos+5])
		pos += 16
		n := authLen - 9
		if n < 12 {
			n = 12
		}
		if pos+n > len(p) {
			return nil, errProtocol
		}
		g.scramble = append(g.scramble, p[pos:pos+n]...)
		pos += n
		if pos < len(p) && p[pos] == 0 {
			pos++
		}
		if g.caps&capPluginAuth != 0 && pos < len(p) {
			g.plugin, _, _ = readNul(append(p[:len(p):len(p)], 0), pos)
		}
	}
	return g, nil
}

// response is a client's handshake response (protocol 4.1).
type response struct {
	caps    uint32
	maxPkt  uint32
	charset byte
	ext     [4]byte // MariaDB extended capabilities (zero here: the router offers none)
	user    string
	auth    []byte
	db      string
	plugin  string
	attrs   []byte // raw connection attributes, lenenc-prefixed block, forwarded as they came
}

func parseResponse(p []byte) (*response, error) {
	if len(p) < 32 {
		return nil, fmt.Errorf("%w: short handshake response", errProtocol)
	}
	r := &response{caps: binary.LittleEndian.Uint32(p), maxPkt: binary.LittleEndian.Uint32(p[4:]), charset: p[8]}
	if r.caps&capProtocol41 == 0 {
		return nil, fmt.Errorf("%w: client does not speak protocol 4.1", errProtocol)
	}
	copy(r.ext[:], p[28:32])
	var err error
	pos := 32
	if r.user, pos, err = readNul(p, pos); err != nil {
		return nil, err
	}
	switch {
	case r.caps&capPluginAuthLenenc != 0:
		var n uint64
		if n, pos, err = readLenenc(p, pos); err != nil || pos+int(n) > len(p) {
			return nil, errProtocol
		}
		r.auth = p[pos : pos+int(n)]
		pos += int(n)
	case r.caps&capSecureConnection != 0:
		if pos >= len(p) || pos+1+int(p[pos]) > len(p) {
			return nil, errProtocol
		}
		r.auth = p[pos+1 : pos+1+int(p[pos])]
		pos += 1 + int(p[pos])
	default:
		var s string
		if s, pos, err = readNul(p, pos); err != nil {
			return nil, err
		}
		r.auth = []byte(s)
	}
	if r.caps&capConnectWithDB != 0 && pos < len(p) {
		if r.db, pos, err = readNul(p, pos); err != nil {
			return nil, err
		}
	}
	if r.caps&capPluginAuth != 0 && pos < len(p) {
		if r.plugin, pos, err = readNul(p, pos); err != nil {
			return nil, err
		}
	}
	if r.caps&capConnectAttrs != 0 && pos < len(p) {
		r.attrs = p[pos:]
	}
	return r, nil
}

func (r *response) encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, r.caps)
	b = binary.LittleEndian.AppendUint32(b, r.maxPkt)
	b = append(b, r.charset)
	b = append(b, make([]byte, 19)...)
	b = append(b, r.ext[:]...)
	b = append(b, r.user...)
	b = append(b, 0)
	if r.caps&capPluginAuthLenenc != 0 {
		b = appendLenenc(b, uint64(len(r.auth)))
	} else {
		b = append(b, byte(len(r.auth)))
	}
	b = append(b, r.auth...)
	if r.caps&capConnectWithDB != 0 {
		b = append(b, r.db...)
		b = append(b, 0)
	}
	if r.caps&capPluginAuth != 0 {
		b = append(b, r.plugin...)
		b = append(b, 0)
	}
	if r.caps&capConnectAttrs != 0 {
		if r.attrs == nil {
			b = append(b, 0)
		} else {
			b = append(b, r.attrs...)
		}
	}
	return b
}

func errPacket(code uint16, state, msg string) []byte {
	b := []byte{0xff}
	b = binary.LittleEndian.AppendUint16(b, code)
	b = append(b, '#')
	b = append(b, state...)
	return append(b, msg...)
}

func errText(p []byte) string {
	if len(p) < 3 {
		return "?"
	}
	if len(p) > 9 && p[3] == '#' {
		return string(p[9:])
	}
	return string(p[3:])
}

func sha1Sum(parts ...[]byte) []byte {
	h := sha1.New()
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func xor(a, b []byte) []byte {
	out := make([]byte, len(a))
	for i := range a {
		out[i] = a[i] ^ b[i]
	}
	return out
}

// recoverStage1 checks a mysql_native_password answer against the stored double-SHA1 (stage2) and
// returns SHA1(password) (stage1), which lets the router answer the owner's scramble in turn
// without ever holding the password: answer = SHA1(scramble || stage2) XOR stage1.
func recoverStage1(scramble, answer, stage2 []byte) ([]byte, bool) {
	if len(stage2) == 0 {
		return nil, len(answer) == 0
	}
	if len(answer) != sha1.Size || len(stage2) != sha1.Size {
		return nil, false
	}
	stage1 := xor(answer, sha1Sum(scramble[:20], stage2))
	return stage1, bytes.Equal(sha1Sum(stage1), stage2)
}

func nativeAnswer(scramble, stage1, stage2 []byte) []byte {
	if len(stage1) == 0 {
		return nil
	}
	return xor(sha1Sum(scramble[:20], stage2), stage1)
}
