package main

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
)

// evictionWatch collects the keys a server reports evicted on memcached's `watch evictions`
// stream (hkv and memcached both offer it), so a miss can be excused only for a key that
// really was evicted.
type evictionWatch struct {
	conn    net.Conn
	mu      sync.Mutex
	keys    map[string]bool
	skipped bool // the server dropped lines: the set may be incomplete
	done    chan struct{}
}

func watchEvictions(addr string) (*evictionWatch, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("watch evictions\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	if l, err := readLine(r); err != nil || l != "OK" {
		conn.Close()
		if err == nil {
			err = fmt.Errorf("watch evictions: %q", l)
		}
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	w := &evictionWatch{conn: conn, keys: map[string]bool{}, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			w.note(strings.TrimRight(line, "\r\n"))
		}
	}()
	return w, nil
}

func (w *evictionWatch) note(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.HasPrefix(line, "skipped=") {
		w.skipped = true
		return
	}
	if !strings.Contains(line, " type=eviction ") {
		return
	}
	for _, f := range strings.Fields(line) {
		if k, ok := strings.CutPrefix(f, "key="); ok {
			if dk, err := url.PathUnescape(k); err == nil {
				k = dk
			}
			w.keys[k] = true
		}
	}
}

// stop waits for lines still in flight, then closes the stream and returns the evicted keys
// and whether the server skipped lines.
func (w *evictionWatch) stop() (map[string]bool, bool) {
	time.Sleep(300 * time.Millisecond)
	w.conn.Close()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys, w.skipped
}
