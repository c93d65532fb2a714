// Command ledgerd is the soak's HTTP target (chaos.httpledger starts and stops it): what an
// http task's run does to the world, in the files and line format of chaos.ledger's command
// task, so the same auditor judges both. A POST to /effect with its run id as
// Idempotency-Key and its attempt as X-Cronfleet-Attempt appends a `start` line to
// DIR/exec.log, then an `effect` line to DIR/effects.log for the first request of its key,
// or a `dedup` line to exec.log for any later one: a target that honours the key, as the
// kit asks. Any other POST is answered 200 and recorded nowhere.
//
//	ledgerd -dir LEDGER -port-file FILE
//
// Lines are `event key attempt epoch_ms pid`, each one O_APPEND write: command tasks append
// to the same exec.log. Written in Go (standard library only) so that it costs the machine
// under test little: the audit's start lag is read here, at a request's arrival, and a
// Python server in the soak's own process added its own queueing to it.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

type ledger struct {
	mu      sync.Mutex
	done    map[string]bool
	exec    *os.File
	effects *os.File
	pid     int
}

func (l *ledger) record(key string, attempt int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now().UnixMilli()
	line := func(event string) []byte {
		return fmt.Appendf(nil, "%s %s %d %d %d\n", event, key, attempt, now, l.pid)
	}
	if _, err := l.exec.Write(line("start")); err != nil {
		return err
	}
	if l.done[key] {
		_, err := l.exec.Write(line("dedup"))
		return err
	}
	l.done[key] = true
	_, err := l.effects.Write(line("effect"))
	return err
}

func open(path string) *os.File {
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		log.Fatalf("ledger: %v", err)
	}
	return file
}

func main() {
	dir := flag.String("dir", "", "the drill's ledger directory")
	portFile := flag.String("port-file", "", "write the port listened on here, once ready")
	flag.Parse()
	if *dir == "" || *portFile == "" {
		log.Fatal("usage: ledgerd -dir LEDGER -port-file FILE")
	}
	l := &ledger{
		done:    map[string]bool{},
		exec:    open(filepath.Join(*dir, "exec.log")),
		effects: open(filepath.Join(*dir, "effects.log")),
		pid:     os.Getpid(),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/effect" {
			key := r.Header.Get("Idempotency-Key")
			attempt, err := strconv.Atoi(r.Header.Get("X-Cronfleet-Attempt"))
			if key == "" || err != nil || attempt < 0 {
				http.Error(w, "Idempotency-Key and X-Cronfleet-Attempt required", http.StatusBadRequest)
				return
			}
			if err := l.record(key, attempt); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	})

	// loopback only; the kernel's backlog (somaxconn), not socketserver's 5: a soak's first
	// fires open ~200 connections at once
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	port := listener.Addr().(*net.TCPAddr).Port
	tmp := *portFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
		log.Fatalf("port-file: %v", err)
	}
	if err := os.Rename(tmp, *portFile); err != nil {
		log.Fatalf("port-file: %v", err)
	}
	// a worker killed mid-request resets its connection: the nemesis's doing, said nowhere
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(discard{}, "", 0)}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Close()
	}()
	if err := server.Serve(listener); err != nil && err != http.ErrServerClosed {
		log.Fatalf("serve: %v", err)
	}
	l.mu.Lock()
	l.exec.Close()
	l.effects.Close()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
