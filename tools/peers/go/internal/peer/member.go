// Package peer is what the Go members share: tests/integration/member.py's protocol.
//
// A member takes member.py's arguments, prints one JSON event per line on stdout (and
// nothing else goes there), and obeys "commit N" and "close" on stdin. End of stdin (the
// test is gone) and SIGTERM close the member as "close" does, so no orphan stays in a
// group. Each library's own logs go to stderr, which the harness shows on a failure.
package peer

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Args are member.py's arguments, with its defaults.
type Args struct {
	Bootstrap      []string
	Group          string
	Topics         []string
	ClientID       string
	Strategy       string
	InstanceID     string
	SessionTimeout time.Duration
	Heartbeat      time.Duration
	MaxPoll        time.Duration
	MetadataMaxAge time.Duration
	// GroupProtocol is "classic" or "consumer" (Kafka 4's KIP-848: the coordinator
	// assigns; franz-go's ServerSideBalancer).
	GroupProtocol string
	// Pattern subscribes to every topic whose whole name matches it (instead of Topics).
	Pattern string
}

// Strategies are the assignor names member.py accepts.
var Strategies = []string{"range", "roundrobin", "sticky", "cooperative-sticky"}

// ParseArgs reads member.py's arguments (Go's flag package takes --name value too) or
// exits 2 with the usage on stderr.
func ParseArgs(program string) Args {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	bootstrap := fs.String("bootstrap", "", "host:port[,host:port...]")
	group := fs.String("group", "", "consumer group id")
	topics := fs.String("topics", "", "comma-separated topics")
	clientID := fs.String("client-id", "", "client id")
	strategy := fs.String("strategy", "range", strings.Join(Strategies, "|"))
	instanceID := fs.String("instance-id", "", "static membership (KIP-345)")
	session := fs.Int("session-timeout-ms", 4000, "session timeout")
	heartbeat := fs.Int("heartbeat-interval-ms", 500, "heartbeat interval")
	maxPoll := fs.Int("max-poll-interval-ms", 30000, "rebalance timeout")
	metadataAge := fs.Int("metadata-max-age-ms", 300000, "metadata refresh interval")
	protocol := fs.String("group-protocol", "classic", "classic|consumer")
	pattern := fs.String("pattern", "", "subscribe to the topics this regular expression matches")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	for name, value := range map[string]string{
		"bootstrap": *bootstrap, "group": *group, "topics": *topics, "client-id": *clientID,
	} {
		if value == "" {
			fmt.Fprintf(os.Stderr, "%s: --%s is required\n", program, name)
			os.Exit(2)
		}
	}
	if *protocol != "classic" && *protocol != "consumer" {
		fmt.Fprintf(os.Stderr, "%s: unknown --group-protocol %q\n", program, *protocol)
		os.Exit(2)
	}
	if !slices.Contains(Strategies, *strategy) {
		fmt.Fprintf(os.Stderr, "%s: unknown --strategy %q\n", program, *strategy)
		os.Exit(2)
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	return Args{
		Bootstrap:      strings.Split(*bootstrap, ","),
		Group:          *group,
		Topics:         strings.Split(*topics, ","),
		ClientID:       *clientID,
		Strategy:       *strategy,
		InstanceID:     *instanceID,
		SessionTimeout: ms(*session),
		Heartbeat:      ms(*heartbeat),
		MaxPoll:        ms(*maxPoll),
		MetadataMaxAge: ms(*metadataAge),
		GroupProtocol:  *protocol,
		Pattern:        *pattern,
	}
}

var emitMu sync.Mutex

// Emit prints one event: {"event": name, ...fields} on one line, flushed.
func Emit(name string, fields map[string]any) {
	event := map[string]any{"event": name}
	for k, v := range fields {
		event[k] = v
	}
	line, err := json.Marshal(event)
	if err != nil {
		panic(err) // only plain values are passed
	}
	emitMu.Lock()
	defer emitMu.Unlock()
	os.Stdout.Write(append(line, '\n')) //nolint:errcheck // a closed stdout: nobody listens
}

// Partitions is a topic -> partitions map, as every Go client keeps an assignment.
type Partitions map[string][]int32

// List is the JSON form: [["t", 0], ...] sorted by topic, then partition.
func (ps Partitions) List() [][]any {
	out := [][]any{}
	for _, t := range slices.Sorted(maps.Keys(ps)) {
		for _, p := range slices.Sorted(slices.Values(ps[t])) {
			out = append(out, []any{t, p})
		}
	}
	return out
}

// Key is a canonical string of the set, for comparing assignments.
func (ps Partitions) Key() string {
	b, _ := json.Marshal(ps.List())
	return string(b)
}

// Minus is the partitions of ps that are not in other.
func (ps Partitions) Minus(other Partitions) Partitions {
	out := Partitions{}
	for t, parts := range ps {
		for _, p := range parts {
			if !slices.Contains(other[t], p) {
				out[t] = append(out[t], p)
			}
		}
	}
	return out
}

// Plus is the union of ps and other.
func (ps Partitions) Plus(other Partitions) Partitions {
	out := Partitions{}
	for _, src := range []Partitions{ps, other} {
		for t, parts := range src {
			for _, p := range parts {
				if !slices.Contains(out[t], p) {
					out[t] = append(out[t], p)
				}
			}
		}
	}
	return out
}

// Empty is true when no partition is in the set.
func (ps Partitions) Empty() bool {
	for _, parts := range ps {
		if len(parts) > 0 {
			return false
		}
	}
	return true
}

// Commands delivers stdin's lines, then "close" at its end; SIGTERM and SIGINT also
// deliver "close".
func Commands() <-chan string {
	out := make(chan string, 16)
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			if line := strings.TrimSpace(scanner.Text()); line != "" {
				out <- line
			}
		}
		out <- "close"
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		out <- "close"
	}()
	return out
}

// ParseCommit reads "commit N"; ok is false for anything else.
func ParseCommit(command string) (offset int64, ok bool) {
	rest, found := strings.CutPrefix(command, "commit ")
	if !found {
		return 0, false
	}
	_, err := fmt.Sscanf(strings.TrimSpace(rest), "%d", &offset)
	return offset, err == nil
}
