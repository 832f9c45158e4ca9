// slacker-router: one MySQL-protocol address for every tenant of a Slacker cluster.
//
// The data path of `slacker router`. It learns routes (tenant -> owner address, the application
// user and its double-SHA1 password hash) as JSON lines on stdin from the Python control side,
// which follows the directory; it serves clients on -listen and its status and Prometheus
// metrics on -admin. With -pipe HOST:PORT it is only a byte pipe to one server (a benchmark's
// reference line). It exits when stdin closes, so it never outlives its control side.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:6033", "address clients connect to")
	admin := flag.String("admin", "", "address of the status and metrics HTTP endpoint (empty: none)")
	pipe := flag.String("pipe", "", "benchmark only: forward every connection's bytes to this HOST:PORT, no login")
	procs := flag.Int("procs", 0, "CPUs the data path may use at once (0: $GOMAXPROCS, else half the host's, at least 1)")
	ownerCA := flag.String("owner-ca", "", "CA file: log in to owners over TLS and verify their certificate and address against it")
	tlsCert := flag.String("tls-cert", "", "certificate (PEM) to offer clients TLS with; with it, plain-text logins are refused")
	tlsKey := flag.String("tls-key", "", "its private key (PEM)")
	dialTimeout := flag.Duration("dial-timeout", 3*time.Second, "timeout of a connection to an owner")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.LUTC | log.Lmicroseconds)
	// Relaying is mostly kernel time spent in the goroutine's own syscalls; more Ps than that
	// needs only adds idle-P spinning and futex wake-ups (measured in bench/router: 1 P on 2 CPUs
	// cost less CPU and latency per round trip than 2). Leave half the host to the application.
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	} else if os.Getenv("GOMAXPROCS") == "" {
		n := runtime.NumCPU() / 2
		if n < 1 {
			n = 1
		}
		runtime.GOMAXPROCS(n)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("cannot listen on %s: %v", *listen, err)
	}
	if *pipe != "" {
		log.Printf("byte pipe %s -> %s", ln.Addr(), *pipe)
		servePipe(ln, *pipe)
		return
	}
	rt := newRouter(*dialTimeout)
	rt.listen = ln.Addr().String()
	if *ownerCA != "" {
		pem, err := os.ReadFile(*ownerCA)
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			log.Fatalf("cannot read the CA file %s: %v", *ownerCA, err)
		}
		rt.ownerTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if *tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			log.Fatalf("cannot load the TLS certificate %s: %v", *tlsCert, err)
		}
		rt.clientTLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	if *admin != "" {
		aln, err := net.Listen("tcp", *admin)
		if err != nil {
			log.Fatalf("cannot listen on %s: %v", *admin, err)
		}
		rt.admin = aln.Addr().String()
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", rt.serveMetrics)
		mux.HandleFunc("/status", rt.serveStatus)
		mux.HandleFunc("/hold", rt.serveHold)
		mux.HandleFunc("/release", rt.serveRelease)
		mux.HandleFunc("/v1/latency/recent", rt.serveRecentLatency)
		go func() { log.Fatal(http.Serve(aln, mux)) }()
	}
	// The control side reads this line to learn the bound addresses (ports may be 0 = any).
	ready, _ := json.Marshal(map[string]string{"event": "ready", "listen": rt.listen, "admin": rt.admin})
	fmt.Println(string(ready))
	go rt.readControl(os.Stdin)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		log.Printf("stopping on %v", s)
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Printf("accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go rt.serve(c)
	}
}

// readControl applies the control side's messages; when stdin closes the router stops.
func (rt *Router) readControl(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		var m controlMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			log.Printf("bad control line: %v", err)
			continue
		}
		if err := rt.apply(m); err != nil {
			log.Printf("control %s: %v", m.Op, err)
		}
	}
	log.Printf("control side gone (stdin closed): stopping")
	os.Exit(0)
}

func servePipe(ln net.Listener, to string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go func(c net.Conn) {
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				return
			}
			go func() { copyPlain(s, c); s.(*net.TCPConn).CloseWrite() }()
			copyPlain(c, s)
			c.Close()
			s.Close()
		}(c)
	}
}

// copyPlain relays with read/write on one buffer. Not io.Copy: between two TCP connections that
// uses splice(2) through a pipe, which costs more than it saves on the small packets of OLTP.
func copyPlain(dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if err != nil {
			return n, err
		}
	}
}
