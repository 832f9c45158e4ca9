package main

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// route is where a tenant's connections go now.
type route struct {
	Tenant string `json:"tenant"`
	Node   string `json:"node"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Epoch  int64  `json:"epoch"`
	User   string `json:"user"`
	// A tenant in a shared server: the client's USER@TENANT logs in to the owner as OwnerUser (the
	// tenant's own account, e.g. t42_app) with Database (its database) as the session's start. Empty
	// for a whole-server tenant: the owner's account is User and the client's database is passed on.
	OwnerUser string `json:"owner_user,omitempty"`
	Database  string `json:"database,omitempty"`
	// When the directory changed this route (its updated_at) and when the router applied it, UTC
	// seconds: their difference is how late the router learned of a flip (hosts' clocks permitting).
	ChangedAt float64 `json:"changed_at"`
	LearnedAt float64 `json:"learned_at"`
	stage2    []byte  // SHA1(SHA1(password)): what the server itself stores; never the password
}

// controlMsg is one line from the control side: a route (its fields inline), or a removal, or
// the directory's reachability.
type controlMsg struct {
	route
	Op        string  `json:"op"`   // route | remove | directory
	Hash      string  `json:"hash"` // hex of the double SHA-1
	UpdatedAt float64 `json:"updated_at"`
	OK        bool    `json:"ok"`
	Error     string  `json:"error"`
	Token     string  `json:"token"`
}

// tenantStats are counters kept per tenant across route changes, and its open connections.
type tenantStats struct {
	active, connections, statements, authFailures, ownerErrors, bytesIn, bytesOut atomic.Int64
	moves, moveFailures, endedAtMove, rolledBackAtMove                            atomic.Int64
	holdStats
	latency latencyStats // client-visible statement and transaction latency (latency.go)
	mu      sync.Mutex
	conns   map[*tracker]struct{}
}

func (s *tenantStats) add(t *tracker) {
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[*tracker]struct{}{}
	}
	s.conns[t] = struct{}{}
	s.mu.Unlock()
}

func (s *tenantStats) remove(t *tracker) {
	s.mu.Lock()
	delete(s.conns, t)
	s.mu.Unlock()
}

// states counts open connections inside a transaction, between statements outside one, and pinned.
func (s *tenantStats) states() (inTrans, idle, pinned int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.conns {
		if t.inTrans.Load() {
			inTrans++
		}
		if t.idle() {
			idle++
		}
		if t.sess.pinned.Load() {
			pinned++
		}
	}
	return
}

type Router struct {
	mu          sync.RWMutex
	routes      map[string]*route
	stats       map[string]*tenantStats
	dirOK       bool
	dirError    string
	dirSince    time.Time
	flips       int64
	listen      string
	admin       string
	started     time.Time
	nextID      atomic.Uint32
	dialTimeout time.Duration
	version     atomic.Value  // server version string learned from the first owner
	rejected    atomic.Int64  // logins refused before a tenant was known (bad name, unknown tenant)
	ownerTLS    *tls.Config   // TLS towards owners (a TLS cluster's tenants require it), verified against the cluster CA
	clientTLS   *tls.Config   // TLS towards clients; when set, plain-text logins are refused
	token       atomic.Value  // what /hold and /release need: a hash of this router's credential (from the control side)
	routed      chan struct{} // closed (and replaced) whenever a route is added or changed: logins waiting for one wake
}

// newTenantWait is how long a login for a tenant this router has no route for waits for one. The
// directory names a tenant from the start of its creation, and its route follows once its owner hands
// out the login hash: a client that connects the moment `tenant create` returns may be a little ahead.
const newTenantWait = 3 * time.Second

func newRouter(dialTimeout time.Duration) *Router {
	rt := &Router{routes: map[string]*route{}, stats: map[string]*tenantStats{}, dirOK: false,
		dirError: "no directory answer yet", dirSince: time.Now(), started: time.Now(), dialTimeout: dialTimeout,
		routed: make(chan struct{})}
	rt.version.Store("5.5.5-10.11.0-MariaDB-slacker-router")
	// Connection ids start far above a server's own: a client's `KILL QUERY <its id>` (the mariadb
	// CLI's Ctrl-C) reaches the owner as an unknown id, never as another session's.
	rt.nextID.Store(1 << 30)
	return rt
}

func (rt *Router) apply(m controlMsg) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	switch m.Op {
	case "route":
		h, err := hex.DecodeString(m.Hash)
		if err != nil || (len(h) != 20 && len(h) != 0) || m.Tenant == "" || m.User == "" {
			return fmt.Errorf("invalid route for %q", m.Tenant)
		}
		if old := rt.routes[m.Tenant]; old != nil && m.Epoch < old.Epoch {
			return fmt.Errorf("tenant %s: epoch %d is older than %d", m.Tenant, m.Epoch, old.Epoch)
		} else if old != nil && (old.Host != m.Host || old.Port != m.Port) {
			rt.flips++
			log.Printf("tenant %s: epoch %d %s:%d -> epoch %d %s:%d", m.Tenant, old.Epoch, old.Host, old.Port,
				m.Epoch, m.Host, m.Port)
		}
		r := m.route
		r.stage2, r.ChangedAt, r.LearnedAt = h, m.UpdatedAt, float64(time.Now().UnixNano())/1e9
		rt.routes[m.Tenant] = &r
		if rt.stats[m.Tenant] == nil {
			rt.stats[m.Tenant] = &tenantStats{}
		}
		close(rt.routed)
		rt.routed = make(chan struct{})
	case "remove":
		delete(rt.routes, m.Tenant)
	case "token":
		rt.token.Store(m.Token)
	case "directory":
		if m.OK != rt.dirOK {
			rt.dirSince = time.Now()
		}
		rt.dirOK, rt.dirError = m.OK, m.Error
	default:
		return fmt.Errorf("unknown op %q", m.Op)
	}
	return nil
}

func (rt *Router) lookup(tenant string) (*route, *tenantStats) {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return rt.routes[tenant], rt.stats[tenant]
}

// awaitRoute is lookup for a login: a tenant without a route yet is waited for, up to `wait`.
func (rt *Router) awaitRoute(tenant string, wait time.Duration) (*route, *tenantStats) {
	if r, st := rt.lookup(tenant); r != nil {
		return r, st // a known tenant (every login but a new tenant's first): no timer
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		rt.mu.RLock()
		r, st, routed := rt.routes[tenant], rt.stats[tenant], rt.routed
		rt.mu.RUnlock()
		if r != nil {
			return r, st
		}
		select {
		case <-routed:
		case <-deadline.C:
			return nil, nil
		}
	}
}

// ownerUser is the account the router logs in to the owner as: a shared tenant's own, else the client's.
func (r *route) ownerUser() string {
	if r.OwnerUser != "" {
		return r.OwnerUser
	}
	return r.User
}

// splitUser reads the tenant from the login name: USER@TENANT (the last '@').
func splitUser(name string) (user, tenant string, ok bool) {
	i := strings.LastIndexByte(name, '@')
	if i <= 0 || i == len(name)-1 {
		return "", "", false
	}
	return name[:i], name[i+1:], true
}

func newScramble() []byte {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b { // printable, never NUL: the greeting ends it with a NUL
		b[i] = 33 + b[i]%94
	}
	return b
}

// MySQL error codes the router answers with.
const (
	erAccessDenied   = 1045
	erDBAccessDenied = 1044
	erHandshake      = 1043
	erUnknownHost    = 2003 // "can't connect": the owner did not answer
	// MariaDB's ER_CONNECTION_KILLED: the connection ends at a move because its session cannot move.
	erConnectionKilled = 1927
)

func (rt *Router) serve(c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second)) // the login must finish in time
	cr := bufio.NewReaderSize(c, 16<<10)
	scramble := newScramble()
	caps := uint32(routerCaps)
	if rt.clientTLS != nil {
		caps |= capSSL
	}
	g := &greeting{version: rt.version.Load().(string), connID: rt.nextID.Add(1), caps: caps, charset: 45,
		status: statusAutocommit, scramble: scramble, plugin: nativePassword}
	if writePacket(c, 0, g.encode()) != nil {
		return
	}
	seq, p, err := readPacket(cr)
	if err != nil {
		return
	}
	if len(p) == 32 && binary.LittleEndian.Uint32(p)&capSSL != 0 && rt.clientTLS != nil {
		// An SSL request: the rest of the login, and everything after it, inside TLS.
		// The client may send its TLS hello right behind the request: the reader may hold it already.
		tc := tls.Server(bufferedConn{c, cr}, rt.clientTLS)
		if tc.Handshake() != nil {
			return
		}
		c = tc
		defer tc.Close()
		cr = bufio.NewReaderSize(tc, 16<<10)
		if seq, p, err = readPacket(cr); err != nil {
			return
		}
	} else if rt.clientTLS != nil {
		rt.rejected.Add(1)
		writePacket(c, seq+1, errPacket(3159, "08004",
			"Connections using insecure transport are prohibited: this router requires TLS (the cluster's CA verifies it)"))
		return
	}
	resp, err := parseResponse(p)
	if err != nil {
		writePacket(c, seq+1, errPacket(erHandshake, "08S01", "Bad handshake"))
		return
	}
	user, tenant, ok := splitUser(resp.user)
	if !ok {
		rt.rejected.Add(1)
		writePacket(c, seq+1, errPacket(erAccessDenied, "28000", fmt.Sprintf(
			"Access denied for user '%s': the router needs USER@TENANT as the user name", resp.user)))
		return
	}
	rte, st := rt.awaitRoute(tenant, newTenantWait)
	if rte == nil {
		rt.rejected.Add(1)
		writePacket(c, seq+1, errPacket(erAccessDenied, "28000", fmt.Sprintf(
			"Access denied for user '%s': no tenant %q in the directory", resp.user, tenant)))
		return
	}
	answer := resp.auth
	if resp.caps&capPluginAuth != 0 && resp.plugin != "" && resp.plugin != nativePassword {
		// Ask for mysql_native_password (clients that default to another plugin switch).
		sw := append([]byte{0xfe}, nativePassword...)
		sw = append(append(append(sw, 0), scramble...), 0)
		seq++
		if writePacket(c, seq, sw) != nil {
			return
		}
		if seq, answer, err = readPacket(cr); err != nil {
			return
		}
	}
	stage1, ok := recoverStage1(scramble, answer, rte.stage2)
	if !ok || user != rte.User {
		st.authFailures.Add(1)
		writePacket(c, seq+1, errPacket(erAccessDenied, "28000", fmt.Sprintf(
			"Access denied for user '%s' (using password: %s)", resp.user, yesNo(len(answer) > 0))))
		return
	}
	if rte.Database != "" && resp.db != "" && resp.db != rte.Database {
		// A shared tenant's session starts in its own database; the owner's grants are the wall.
		st.authFailures.Add(1)
		writePacket(c, seq+1, errPacket(erDBAccessDenied, "42000", fmt.Sprintf(
			"Access denied for user '%s' to database '%s': tenant %s is database %s", resp.user, resp.db, tenant,
			rte.Database)))
		return
	}
	s, sr, okPkt, err := rt.loginOwner(rte, resp, stage1)
	if err != nil {
		st.ownerErrors.Add(1)
		log.Printf("tenant %s: owner %s:%d: %v", tenant, rte.Host, rte.Port, err)
		if okPkt == nil {
			okPkt = errPacket(erUnknownHost, "HY000", fmt.Sprintf(
				"Tenant %s: its owner %s:%d did not answer (%v)", tenant, rte.Host, rte.Port, err))
		}
		writePacket(c, seq+1, okPkt)
		return
	}
	defer s.Close()
	t := newTracker(resp.caps&capDeprecateEOF != 0)
	t.lat = &st.latency
	t.sess.clientTrack = resp.caps&capSessionTrack != 0
	t.sess.db = resp.db
	if t.sess.db == "" {
		t.sess.db = rte.Database // the session starts in a shared tenant's database (loginOwner sent it)
	}
	if writePacket(c, seq+1, t.sess.okSession(okPkt)) != nil {
		return
	}
	c.SetDeadline(time.Time{})
	st.connections.Add(1)
	st.active.Add(1)
	defer st.active.Add(-1)
	st.add(t)
	defer st.remove(t)
	cn := &clientConn{rt: rt, tenant: tenant, c: c, cr: cr, st: st, t: t, resp: resp, stage1: stage1,
		owner: s, ownerR: sr, epoch: rte.Epoch}
	cn.forward()
}

// bufferedConn reads through the bufio.Reader that may already hold the connection's next bytes.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func yesNo(b bool) string {
	if b {
		return "YES"
	}
	return "NO"
}

// loginOwner opens a connection to the tenant's owner and logs in as the application user with
// the client's capabilities, character set, database and connection attributes. It returns the
// owner's final OK packet (or its ERR packet with a non-nil error).
func (rt *Router) loginOwner(r *route, cl *response, stage1 []byte) (net.Conn, *bufio.Reader, []byte, error) {
	s, err := net.DialTimeout("tcp", net.JoinHostPort(r.Host, fmt.Sprint(r.Port)), rt.dialTimeout)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(pkt []byte, err error) (net.Conn, *bufio.Reader, []byte, error) {
		s.Close()
		return nil, nil, pkt, err
	}
	s.(*net.TCPConn).SetNoDelay(true)
	s.SetDeadline(time.Now().Add(rt.dialTimeout + 5*time.Second))
	sr := bufio.NewReaderSize(s, 16<<10)
	_, p, err := readPacket(sr)
	if err != nil {
		return fail(nil, err)
	}
	g, err := parseGreeting(p)
	if err != nil {
		return fail(nil, err)
	}
	rt.version.Store(g.version)
	seq := byte(1)
	var conn net.Conn = s
	if rt.ownerTLS != nil {
		if g.caps&capSSL == 0 {
			return fail(nil, fmt.Errorf("the owner offers no TLS"))
		}
		req := binary.LittleEndian.AppendUint32(nil, (cl.caps&routerCaps&(g.caps|capLongPassword)&^capSSL)|capSSL|capProtocol41|capSecureConnection|capPluginAuth)
		req = binary.LittleEndian.AppendUint32(req, cl.maxPkt)
		req = append(req, cl.charset)
		req = append(req, make([]byte, 23)...)
		if writePacket(s, seq, req) != nil {
			return fail(nil, io.ErrClosedPipe)
		}
		seq++
		conf := rt.ownerTLS.Clone()
		conf.ServerName = r.Host
		tc := tls.Client(s, conf)
		if err := tc.Handshake(); err != nil {
			return fail(nil, fmt.Errorf("TLS to the owner: %w", err))
		}
		conn = tc
		sr = bufio.NewReaderSize(tc, 16<<10)
	}
	out := &response{caps: cl.caps & routerCaps & (g.caps | capLongPassword) &^ capSSL, maxPkt: cl.maxPkt,
		charset: cl.charset, user: r.ownerUser(), db: cl.db, plugin: nativePassword, attrs: cl.attrs}
	out.caps |= capPluginAuth | capSecureConnection | capProtocol41
	if out.db == "" && r.Database != "" { // a shared tenant's session starts in its database
		out.db = r.Database
		out.caps |= capConnectWithDB
	}
	if g.caps&capSessionTrack != 0 {
		out.caps |= capSessionTrack // the router reads the session tracker (move.go), whatever the client asked
	}
	if conn != s {
		out.caps |= capSSL
	}
	if g.caps&capConnectAttrs != 0 {
		out.caps |= capConnectAttrs
		out.attrs = withRouterAttr(cl.attrs)
	}
	out.auth = nativeAnswer(g.scramble, stage1, r.stage2)
	if writePacket(conn, seq, out.encode()) != nil {
		return fail(nil, io.ErrClosedPipe)
	}
	for i := 0; i < 3; i++ {
		seq, p, err = readPacket(sr)
		if err != nil {
			return fail(nil, err)
		}
		switch {
		case len(p) > 0 && p[0] == 0x00:
			if out.caps&capSessionTrack != 0 {
				if err := simpleQuery(conn, sr, enableTracking); err != nil {
					return fail(nil, err)
				}
			}
			s.SetDeadline(time.Time{})
			return conn, sr, p, nil
		case len(p) > 0 && p[0] == 0xfe: // the owner asks for another plugin or a fresh scramble
			plugin, pos, err := readNul(p, 1)
			if err != nil || plugin != nativePassword || len(p)-pos < 20 {
				return fail(nil, fmt.Errorf("owner wants auth plugin %q", plugin))
			}
			seq++
			if writePacket(conn, seq, nativeAnswer(p[pos:pos+20], stage1, r.stage2)) != nil {
				return fail(nil, io.ErrClosedPipe)
			}
		case len(p) > 0 && p[0] == 0xff:
			return fail(p, fmt.Errorf("owner refused the login: %s", errText(p)))
		default:
			return fail(nil, fmt.Errorf("%w: unexpected login reply 0x%02x", errProtocol, p[0]))
		}
	}
	return fail(nil, fmt.Errorf("%w: too many auth switches", errProtocol))
}

// clientConn is one client connection and the owner connection it is relayed to now.
type clientConn struct {
	rt     *Router
	tenant string
	c      net.Conn
	cr     *bufio.Reader
	st     *tenantStats
	t      *tracker
	resp   *response // the client's login, replayed on a new owner
	stage1 []byte
	owner  net.Conn
	ownerR *bufio.Reader
	epoch  int64
	relay  chan struct{} // closed when the owner relay of this owner connection ended
	gone   atomic.Bool   // the owner closed while the client was between statements and the route moved
	moving atomic.Bool   // the router itself is closing the old owner connection
	ending atomic.Bool   // the client quit or closed
	last   atomic.Value  // the start of the last COM_QUERY, upper case (what a lost owner was running)
}

func (cn *clientConn) lastCommand() string {
	v, _ := cn.last.Load().(string)
	return v
}

// forward relays packets until either side closes. Client to owner it reads packet headers (a
// command starts with sequence 0); owner to client it reads headers and the first bytes of each
// packet for the tracker, and writes whole responses at once. Before a command, a connection
// whose tenant moved is moved too when it can be (move.go).
func (cn *clientConn) forward() {
	cn.startRelay()
	var h [4]byte
	cr, t, st := cn.cr, cn.t, cn.st
	for {
		if _, err := io.ReadFull(cr, h[:]); err != nil {
			break
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if n+4 <= cr.Size() {
			// one write per packet: header and payload together
			body, err := cr.Peek(n)
			if err != nil {
				break
			}
			if h[3] == 0 && n > 0 {
				if body[0] == comQuit {
					cn.ending.Store(true)
				}
				t.passing.Store(true)
				cn.waitHold()
				ok, answered := cn.beforeCommand(body)
				if !ok {
					break
				}
				if answered { // the router answered it itself (a transaction lost at a move)
					t.passing.Store(false)
					cr.Discard(n)
					continue
				}
				st.statements.Add(1)
				t.sess.checkCommand(body)
				if body[0] == comStmtPrepare {
					t.stmts.sentPrepare(body[1:])
				}
				cn.last.Store(commandText(body))
				t.sent(body[0])
				if isStmtCommand(body[0]) {
					body = cn.stmtCommand(body)
					h[0], h[1], h[2] = byte(len(body)), byte(len(body)>>8), byte(len(body)>>16)
				}
				t.passing.Store(false)
			}
			pkt := make([]byte, 0, len(body)+4)
			pkt = append(append(pkt, h[:]...), body...)
			if _, err := cn.owner.Write(pkt); err != nil {
				break
			}
			cr.Discard(n)
		} else {
			if h[3] == 0 {
				first, err := cr.Peek(1)
				if err != nil {
					break
				}
				t.passing.Store(true)
				cn.waitHold()
				if ok, answered := cn.beforeCommand(first); !ok || answered {
					break // a command over 16 KiB the router would answer itself: ends the connection
				}
				st.statements.Add(1)
				t.sent(first[0])
				if isStmtCommand(first[0]) {
					// A long execute: its statement id (and parameter types) are in the first bytes.
					prefix, err := cr.Peek(stmtPrefixLen)
					if err != nil {
						break
					}
					out := cn.stmtCommand(prefix)
					if n2 := n - len(prefix) + len(out); n2 != n {
						if n2 >= maxPacketPayload {
							break
						}
						n = n2
						h[0], h[1], h[2] = byte(n), byte(n>>8), byte(n>>16)
					}
					t.passing.Store(false)
					if _, err := cn.owner.Write(append(h[:], out...)); err != nil {
						break
					}
					cr.Discard(len(prefix))
					if _, err := io.CopyN(cn.owner, cr, int64(n-len(out))); err != nil {
						break
					}
					st.bytesIn.Add(int64(n + 4))
					continue
				}
				t.sess.pin("a command over 16 KiB")
				if first[0] == comStmtPrepare {
					t.stmts.sentPrepare(nil) // its answer is matched, never prepared again (pinned)
				}
				t.passing.Store(false)
			}
			if _, err := cn.owner.Write(h[:]); err != nil {
				break
			}
			if _, err := io.CopyN(cn.owner, cr, int64(n)); err != nil {
				break
			}
		}
		st.bytesIn.Add(int64(n + 4))
	}
	t.passing.Store(false)
	cn.ending.Store(true)
	if cw, ok := cn.owner.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	<-cn.relay
	cn.owner.Close()
}

// beforeCommand moves the connection to the tenant's new owner when the route changed and the
// connection can move. ok false: the connection must end; answered: the router answered the
// command itself and it must not be sent on.
func (cn *clientConn) beforeCommand(body []byte) (ok, answered bool) {
	cmd := body[0]
	r, _ := cn.rt.lookup(cn.tenant)
	if r == nil || r.Epoch <= cn.epoch {
		return !cn.gone.Load(), false
	}
	if cmd == comQuit {
		return false, false
	}
	t := cn.t
	between := t.awaiting.Load() == 0 && !t.untracked.Load() && !t.longData.Load()
	if between && t.sess.pinned.Load() {
		// Between statements, but with state the new owner cannot be given: end it, saying why,
		// rather than run its next command on the retired owner or on the new one without it.
		reason, _ := t.sess.pinReason.Load().(string)
		// Counted before the client is answered, so anyone it tells afterwards sees the count.
		cn.st.endedAtMove.Add(1)
		cn.ending.Store(true)
		writePacket(cn.c, 1, errPacket(erConnectionKilled, "70100", fmt.Sprintf(
			"Tenant %s moved to a new owner and this connection's session cannot move (%s): reconnect",
			cn.tenant, reason)))
		log.Printf("tenant %s: a connection ended at a move: its session holds %s", cn.tenant, reason)
		return false, false
	}
	if !between {
		if cn.gone.Load() {
			return false, false // its owner is gone with a command in flight: end it (counted)
		}
		return true, false // a response outstanding: it stays with its owner until it is answered
	}
	inTrans := t.inTrans.Load()
	if err := cn.move(r); err != nil {
		log.Printf("tenant %s: moving a connection to %s:%d failed: %v", cn.tenant, r.Host, r.Port, err)
		cn.st.moveFailures.Add(1)
		return false, false
	}
	if !inTrans {
		return true, false
	}
	// Its transaction began on the old owner, which the directory has replaced: it can never
	// commit there (fenced, then retired). Closing the old connection (move) rolled it back; the
	// command that would have continued it is answered as such, and its COMMIT was never sent.
	t.inTrans.Store(false)
	cn.st.rolledBackAtMove.Add(1)
	return writePacket(cn.c, 1, cn.lostAnswer(commandText(body))) == nil, true
}

// commandText is the start of a COM_QUERY, upper case ("" for other commands).
func commandText(body []byte) string {
	if len(body) == 0 || body[0] != comQuery {
		return ""
	}
	q := body[1:]
	if len(q) > 64 {
		q = q[:64]
	}
	return strings.ToUpper(strings.TrimSpace(string(q)))
}

// lostAnswer is the answer to a command of a transaction that was rolled back because its owner
// went away: OK for a ROLLBACK, else 1213/40001 (restart it).
func (cn *clientConn) lostAnswer(text string) []byte {
	if strings.HasPrefix(text, "ROLLBACK") && !strings.Contains(text, " TO ") {
		status := byte(0)
		if cn.t.autocommit.Load() {
			status = statusAutocommit
		}
		return []byte{0x00, 0, 0, status, 0, 0, 0}
	}
	return errPacket(1213, "40001", fmt.Sprintf("Tenant %s moved to a new owner while this transaction was open: "+
		"it was rolled back; restart it", cn.tenant))
}

// move logs in to the new owner with the session's database and variables, then swaps.
func (cn *clientConn) move(r *route) error {
	t0 := time.Now()
	defer func() { cn.st.noteMove(time.Since(t0)) }()
	resp := *cn.resp
	resp.db = cn.t.sess.db
	if resp.db != "" {
		resp.caps |= capConnectWithDB
	}
	s, sr, _, err := cn.rt.loginOwner(r, &resp, cn.stage1)
	if err != nil {
		return err
	}
	if err := cn.t.sess.restore(s, sr); err != nil {
		s.Close()
		return err
	}
	if err := cn.t.stmts.reprepare(s, sr, cn.t.deprecateEOF); err != nil {
		s.Close()
		return err
	}
	cn.moving.Store(true)
	cn.owner.Close()
	<-cn.relay
	cn.moving.Store(false)
	cn.owner, cn.ownerR, cn.epoch = s, sr, r.Epoch
	cn.gone.Store(false)
	cn.st.moves.Add(1)
	cn.startRelay()
	return nil
}

func (cn *clientConn) startRelay() {
	done := make(chan struct{})
	cn.relay = done
	ownerR, epoch := cn.ownerR, cn.epoch
	go func() {
		defer close(done)
		n, _ := relayOwner(cn.c, ownerR, cn.t)
		cn.st.bytesOut.Add(n)
		if cn.moving.Load() {
			return // the router closed it to move: the client stays
		}
		// The owner ended the connection. Between statements, with the tenant moved (or moving:
		// a retired owner goes right after the flip), the client may continue on the new owner;
		// beforeCommand tells a pinned session why it cannot, and a transaction that it was lost.
		// A statement of a transaction in flight is answered here (it cannot have committed).
		t := cn.t
		between := t.awaiting.Load() == 0 && !t.untracked.Load() && !t.longData.Load()
		if cn.ending.Load() || (t.sess.pinned.Load() && !between) ||
			cn.rt.waitNewerRoute(cn.tenant, epoch, 2*time.Second) == nil {
			cn.countEnded(epoch)
			cn.c.Close()
			return
		}
		if !between && !cn.answerLostTransaction() {
			cn.countEnded(epoch)
			cn.c.Close()
			return
		}
		cn.gone.Store(true)
	}()
}

func (cn *clientConn) countEnded(epoch int64) {
	if cn.ending.Load() {
		return
	}
	if r, _ := cn.rt.lookup(cn.tenant); r != nil && r.Epoch > epoch {
		cn.st.endedAtMove.Add(1)
	}
}

// answerLostTransaction answers the one command a client waits on when its owner went away with
// the client's transaction open: the transaction cannot have committed (its COMMIT was not sent),
// so the client is told it was rolled back (SQLSTATE 40001, restart it) — or, for a ROLLBACK,
// that it is done. A COMMIT in flight has an unknown outcome: false, the connection must end.
func (cn *clientConn) answerLostTransaction() bool {
	t := cn.t
	if t.awaiting.Load() != 1 || t.busy || !t.inTrans.Load() || t.untracked.Load() {
		return false
	}
	last := cn.lastCommand()
	if last == "" || strings.Contains(last, "COMMIT") || strings.HasPrefix(last, "END") || strings.HasPrefix(last, "XA") {
		return false
	}
	pkt := cn.lostAnswer(last)
	cn.st.rolledBackAtMove.Add(1) // the transaction is lost whether or not the answer reaches the client
	if writePacket(cn.c, 1, pkt) != nil {
		return false
	}
	select {
	case <-t.pending:
	default:
	}
	t.awaiting.Store(0)
	t.inTrans.Store(false)
	return true
}

// relayOwner copies the owner's packets to the client, feeding the tracker. It flushes whenever
// the next read could block, so no packet ever waits in the router.
func relayOwner(c net.Conn, sr *bufio.Reader, t *tracker) (int64, error) {
	w := bufio.NewWriterSize(c, 32<<10)
	var total int64
	var h [4]byte
	for {
		if sr.Buffered() < 4 && w.Flush() != nil {
			return total, io.ErrClosedPipe
		}
		if _, err := io.ReadFull(sr, h[:]); err != nil {
			w.Flush()
			return total, err
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if n <= sr.Size() {
			if sr.Buffered() < n && w.Flush() != nil {
				return total, io.ErrClosedPipe
			}
			body, err := sr.Peek(n)
			if err != nil {
				return total, err
			}
			t.packet(body, n)
			if t.okPkt {
				if out := t.sess.okSession(body); len(out) != n {
					h[0], h[1], h[2] = byte(len(out)), byte(len(out)>>8), byte(len(out)>>16)
					body = out
				}
			}
			w.Write(h[:])
			w.Write(body)
			sr.Discard(n)
		} else {
			w.Write(h[:])
			w.Flush()
			head, err := sr.Peek(32)
			if err != nil {
				return total, err
			}
			t.packet(head, n)
			if _, err := io.CopyN(w, sr, int64(n)); err != nil {
				return total, err
			}
		}
		total += int64(n + 4)
	}
}
