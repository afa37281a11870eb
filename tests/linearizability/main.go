// lincheck drives a memcached-protocol server (hkv or memcached) over TCP with concurrent
// pipelining clients, records the history (when each request was written and when its
// reply was parsed) and checks each key's history for linearizability with Porcupine.
// It prints one line per key and, last, "linearizability: N passed, M failed" (keys); the
// exit status is 0 only when every key's history was found linearizable (2 when the run
// itself failed).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// verbose: print per-key check times (-v).
var verbose bool

func main() {
	addr := flag.String("addr", "127.0.0.1:11211", "server to test, host:port")
	clients := flag.Int("clients", 16, "concurrent clients, one TCP connection each")
	keys := flag.Int("keys", 4, "hot keys (even-numbered ones are counter keys: set/get/delete/incr; odd ones cas keys: set/get/gets/delete/cas)")
	ops := flag.Int("ops", 300, "requests per client")
	pipeline := flag.Int("pipeline", 4, "requests a client writes before reading their replies")
	timeout := flag.Int("timeout", 10, "seconds allowed to check each key, 0: no limit (past it the key fails as unknown)")
	allowEvicted := flag.Bool("allow-evicted", false, "accept any miss as an eviction just before it (for runs under memory pressure; weakens the model)")
	watchEvicted := flag.Bool("watch-evictions", false, "accept a miss as an eviction only for keys the server reports on `watch evictions` (memcached's stream; hkv has it too)")
	valueSize := flag.Int("value-size", 32, "bytes per value written to cas keys (each write unique)")
	seed := flag.Int64("seed", time.Now().UnixNano(), "random seed")
	vizDir := flag.String("viz-dir", "", "write a Porcupine visualization (HTML) of each failed key here")
	prefix := flag.String("prefix", "", "key prefix (default: lin-<random>- so runs never see each other's keys)")
	save := flag.String("save-history", "", "write the recorded history here (JSON) before checking it")
	load := flag.String("check-history", "", "check a history saved with -save-history instead of running clients")
	flag.BoolVar(&verbose, "v", false, "print how long each key took to check and how many of its ops were checked")
	flag.Parse()
	if *load != "" {
		history, err := loadHistory(*load)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lincheck:", err)
			os.Exit(2)
		}
		os.Exit(report(history, func(string) bool { return *allowEvicted }, *timeout, *vizDir))
	}
	if *clients < 1 || *keys < 1 || *ops < 1 || *pipeline < 1 || *valueSize < 1 {
		fmt.Fprintln(os.Stderr, "lincheck: -clients, -keys, -ops, -pipeline and -value-size must be positive")
		os.Exit(2)
	}
	if *prefix == "" {
		*prefix = "lin-" + strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36) + "-"
	}

	cfg := &clientConfig{
		addr: *addr, prefix: *prefix, keys: *keys, ops: *ops, pipeline: *pipeline,
		valueSize: *valueSize, deadline: 2 * time.Minute,
	}
	before := serverStats(*addr)
	fmt.Printf("lincheck: %s, %d clients x %d ops, pipeline %d, %d keys, value size %d, seed %d, allow-evicted %v\n",
		*addr, *clients, *ops, *pipeline, *keys, *valueSize, *seed, *allowEvicted)

	var (
		mu      sync.Mutex
		history []porcupine.Operation
		errs    []string
		wg      sync.WaitGroup
	)
	var watcher *evictionWatch
	if *watchEvicted {
		w, err := watchEvictions(*addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lincheck:", err)
			fmt.Printf("linearizability: 0 passed, %d failed\n", *keys)
			os.Exit(2)
		}
		watcher = w
	}
	conns := make([]net.Conn, *clients)
	readers := make([]*bufio.Reader, *clients)
	for c := range conns {
		conn, r, err := dial(*addr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lincheck: client %d: %v\n", c, err)
			fmt.Printf("linearizability: 0 passed, %d failed\n", *keys) // the run did not complete
			os.Exit(2)
		}
		defer conn.Close()
		conns[c], readers[c] = conn, r
	}
	// All clients start together, once every connection is up.
	ready := make(chan struct{})
	for c := range conns {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			<-ready
			h, err := runClient(cfg, conns[c], readers[c], c, *seed+int64(c)*7919)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("client %d: %v", c, err))
				return
			}
			history = append(history, h...)
		}(c)
	}
	cfg.start = time.Now()
	close(ready)
	wg.Wait()
	recorded := time.Since(cfg.start)
	if len(errs) > 0 {
		sort.Strings(errs)
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, "lincheck:", e)
		}
		fmt.Printf("linearizability: 0 passed, %d failed\n", *keys) // the run did not complete
		os.Exit(2)
	}
	fmt.Printf("recorded %d ops in %.2fs%s\n", len(history), recorded.Seconds(), outcomes(history))
	if after := serverStats(*addr); after != nil {
		fmt.Printf("server: evictions %s during the run\n", delta(before, after, "evictions"))
	}
	if *save != "" {
		if err := saveHistory(*save, history); err != nil {
			fmt.Fprintln(os.Stderr, "lincheck:", err)
			os.Exit(2)
		}
	}
	allow := func(string) bool { return *allowEvicted }
	if watcher != nil {
		evicted, skipped := watcher.stop()
		hot := map[string]bool{}
		for _, op := range history {
			k := op.Input.(Input).Key
			hot[k] = true
		}
		n := 0
		for k := range evicted {
			if hot[k] {
				n++
			}
		}
		fmt.Printf("watch evictions: %d of the %d keys evicted during the run\n", n, len(hot))
		if skipped {
			// The server dropped lines: an evicted key may be missing from the set.
			fmt.Println("watch evictions: the server skipped lines; every miss is excused")
			allow = func(string) bool { return true }
		} else {
			allow = func(k string) bool { return *allowEvicted || evicted[k] }
		}
	}
	os.Exit(report(history, allow, *timeout, *vizDir))
}

// report checks the history, prints the result and returns the exit status.
func report(history []porcupine.Operation, allowEvicted func(string) bool, timeout int, vizDir string) int {
	t := time.Now()
	passed, failed := check(history, allowEvicted, time.Duration(timeout)*time.Second, vizDir)
	fmt.Printf("checked in %.2fs\n", time.Since(t).Seconds())
	fmt.Printf("linearizability: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

// savedOp is one operation of a saved history.
type savedOp struct {
	Client       int
	Call, Return int64
	Input        Input
	Output       Output
}

func saveHistory(path string, h []porcupine.Operation) error {
	ops := make([]savedOp, len(h))
	for i, op := range h {
		ops[i] = savedOp{op.ClientId, op.Call, op.Return, op.Input.(Input), op.Output.(Output)}
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func loadHistory(path string) ([]porcupine.Operation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ops []savedOp
	if err := json.Unmarshal(b, &ops); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	h := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		h[i] = porcupine.Operation{ClientId: o.Client, Call: o.Call, Return: o.Return, Input: o.Input, Output: o.Output}
	}
	return h, nil
}

// outcomes summarizes the replies, e.g. " (get: miss 120 value 300; ...)".
func outcomes(h []porcupine.Operation) string {
	count := map[string]map[string]int{}
	for _, op := range h {
		in, out := op.Input.(Input), op.Output.(Output)
		if count[in.Op] == nil {
			count[in.Op] = map[string]int{}
		}
		count[in.Op][out.Kind]++
	}
	var parts []string
	for _, o := range []string{"set", "get", "gets", "delete", "incr", "cas"} {
		if count[o] == nil {
			continue
		}
		var kinds []string
		for k := range count[o] {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		var s []string
		for _, k := range kinds {
			s = append(s, fmt.Sprintf("%s %d", k, count[o][k]))
		}
		parts = append(parts, o+": "+strings.Join(s, " "))
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func delta(before, after map[string]string, stat string) string {
	a, err := strconv.ParseUint(after[stat], 10, 64)
	if err != nil {
		return "unknown"
	}
	b, _ := strconv.ParseUint(before[stat], 10, 64)
	return strconv.FormatUint(a-b, 10)
}

// check runs Porcupine on each key's history and prints one line per key; it returns the
// number of keys that passed and failed (a check that timed out fails).
// allowEvicted says per key whether a miss may be an eviction.
func check(history []porcupine.Operation, allowEvicted func(string) bool, timeout time.Duration, vizDir string) (int, int) {
	strict, lenient := kvModel(false), kvModel(true)
	parts := strict.Partition(history)
	modelOf := func(part []porcupine.Operation) porcupine.Model {
		if allowEvicted(part[0].Input.(Input).Key) {
			return lenient
		}
		return strict
	}
	// Keys are checked in parallel on half the cores (each against its own timeout: a busy
	// machine slows every check down) and reported in order.
	results := make([]porcupine.CheckResult, len(parts))
	reduced := make([][]porcupine.Operation, len(parts))
	took := make([]time.Duration, len(parts))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.NumCPU()/2))
	for i, all := range parts {
		wg.Add(1)
		go func(i int, all []porcupine.Operation) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t := time.Now()
			withTimes := make([]porcupine.Operation, len(all))
			for j, op := range all {
				op.Metadata = recorded{op.Call, op.Return}
				withTimes[j] = op
			}
			reduced[i] = reduce(tighten(withTimes))
			results[i] = porcupine.CheckOperationsTimeout(modelOf(all), reduced[i], timeout)
			took[i] = time.Since(t)
		}(i, all)
	}
	wg.Wait()
	passed, failed := 0, 0
	for i, all := range parts {
		key := all[0].Input.(Input).Key
		switch results[i] {
		case porcupine.Ok:
			how := ""
			if allowEvicted(key) {
				how = ", misses excused as evictions"
			}
			fmt.Printf("key %s: ok (%d ops%s)\n", key, len(all), how)
			passed++
		case porcupine.Illegal:
			fmt.Printf("key %s: VIOLATION\n", key)
			failed++
			explain(modelOf(all), reduced[i], timeout, vizDir, key)
		default:
			fmt.Printf("key %s: unknown (timeout)\n", key)
			failed++
		}
		if verbose {
			fmt.Printf("  %d ops checked (%d redundant reads dropped) in %.2fs\n",
				len(reduced[i]), len(all)-len(reduced[i]), took[i].Seconds())
		}
	}
	return passed, failed
}

// explain re-checks a failed key verbosely, prints where its longest partial linearization
// gets stuck (the state reached and the operations that could have come next) and writes
// the visualization if asked to.
func explain(model porcupine.Model, part []porcupine.Operation, timeout time.Duration, vizDir, key string) {
	res, info := porcupine.CheckOperationsVerbose(model, part, timeout)
	if res != porcupine.Illegal {
		fmt.Printf("  (the verbose re-check answered %v)\n", res)
		return
	}
	if vizDir != "" {
		if err := os.MkdirAll(vizDir, 0o755); err == nil {
			path := filepath.Join(vizDir, key+".html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				fmt.Printf("  visualization: %s\n", path)
			} else {
				fmt.Printf("  visualization failed: %v\n", err)
			}
		}
	}
	partials := info.PartialLinearizations()
	if len(partials) == 0 {
		return
	}
	var longest []int
	for _, l := range partials[0] {
		if len(l) > len(longest) {
			longest = l
		}
	}
	st := model.Init()
	in := make([]bool, len(part))
	for _, id := range longest {
		_, st = model.Step(st, part[id].Input, part[id].Output)
		in[id] = true
	}
	minRet := int64(1<<63 - 1)
	for id, op := range part {
		if !in[id] && op.Return < minRet {
			minRet = op.Return
		}
	}
	fmt.Printf("  longest linearization: %d of %d ops, ending in state %s; its last ops:\n",
		len(longest), len(part), model.DescribeState(st))
	from := len(longest) - 4
	if from < 0 {
		from = 0
	}
	for _, id := range longest[from:] {
		fmt.Printf("    %s\n", describe(model, part[id]))
	}
	fmt.Println("  the operations that could come next, none of which leads to a full linearization:")
	for id, op := range part {
		if !in[id] && op.Call <= minRet {
			fmt.Printf("    %s\n", describe(model, op))
		}
	}
}

// recorded is an operation's interval as recorded, kept as its metadata because tighten
// may narrow the interval that is checked.
type recorded struct{ call, ret int64 }

func describe(model porcupine.Model, op porcupine.Operation) string {
	call, ret := op.Call, op.Return
	narrowed := ""
	if r, ok := op.Metadata.(recorded); ok {
		call, ret = r.call, r.ret
		if r.call != op.Call || r.ret != op.Return {
			narrowed = fmt.Sprintf(" (checked as [%.6fs, %.6fs])", float64(op.Call)/1e9, float64(op.Return)/1e9)
		}
	}
	return fmt.Sprintf("client %d [%.6fs, %.6fs]%s %s", op.ClientId, float64(call)/1e9, float64(ret)/1e9, narrowed,
		model.DescribeOperation(op.Input, op.Output))
}
