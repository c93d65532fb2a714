// Command ledger is the load tests' HTTP target: it answers every request 200 at once and
// records, per request, its Idempotency-Key and the instant it arrived, so a storm of
// http tasks can be checked for drops and duplicates at the target itself.
//
// Written in Go (standard library only) so that it costs the machine under test little.
//
//	ledger -addr 127.0.0.1:0 -out ledger.tsv -port-file port.txt
//
// A request with ?delay_ms=N is answered N ms after it arrived (a slow target).
//
// Each line of -out: key <TAB> arrival (Unix µs) <TAB> method <TAB> path. Lines are
// buffered and flushed every 100 ms and on SIGTERM/SIGINT. GET /count answers how many
// requests were recorded so far.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type record struct {
	key     string
	arrival int64
	method  string
	path    string
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	out := flag.String("out", "ledger.tsv", "where the records go")
	portFile := flag.String("port-file", "", "write the port listened on here, once ready")
	flag.Parse()

	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		log.Fatalf("addr: %v", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("addr: %q is not a loopback address; the ledger serves load tests on this machine only", host)
	}
	file, err := os.Create(*out)
	if err != nil {
		log.Fatalf("out: %v", err)
	}
	writer := bufio.NewWriterSize(file, 1<<20)
	records := make(chan record, 1<<16)
	var count atomic.Int64
	var mu sync.Mutex

	done := make(chan struct{})
	go func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case r, ok := <-records:
				if !ok {
					mu.Lock()
					writer.Flush()
					mu.Unlock()
					close(done)
					return
				}
				mu.Lock()
				fmt.Fprintf(writer, "%s\t%d\t%s\t%s\n", r.key, r.arrival, r.method, r.path)
				mu.Unlock()
			case <-ticker.C:
				mu.Lock()
				writer.Flush()
				mu.Unlock()
			}
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("/count", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d\n", count.Load())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		arrival := time.Now().UnixMicro()
		records <- record{r.Header.Get("Idempotency-Key"), arrival, r.Method, r.URL.Path}
		count.Add(1)
		// ?delay_ms=N: answer after N ms (at most a minute), as a slow target would; the
		// arrival is recorded first, so an overload's lag is the kit's, not the target's
		if d, err := strconv.Atoi(r.URL.Query().Get("delay_ms")); err == nil && d > 0 {
			time.Sleep(time.Duration(min(d, 60_000)) * time.Millisecond)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("ok\n"))
	})

	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	port := listener.Addr().(*net.TCPAddr).Port
	if *portFile != "" {
		tmp := *portFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
			log.Fatalf("port-file: %v", err)
		}
		if err := os.Rename(tmp, *portFile); err != nil {
			log.Fatalf("port-file: %v", err)
		}
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Close()
	}()
	if err := server.Serve(listener); err != nil && err != http.ErrServerClosed {
		log.Fatalf("serve: %v", err)
	}
	close(records)
	<-done
	file.Close()
}
