package peer

// The admin programs' shared command line: both libraries answer the same verbs with
// the same JSON, so a test can run one check against either.

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// AdminUsage lists the verbs; each program implements all of them.
const AdminUsage = `usage: %s --bootstrap host:port VERB [ARGS]

  list-groups [--states Stable,Empty]
  describe-groups GROUP...
  list-group-offsets GROUP
  alter-group-offsets GROUP TOPIC:PARTITION=OFFSET...
  delete-group-offsets GROUP TOPIC:PARTITION...
  delete-group GROUP
  remove-members GROUP INSTANCE_ID...
  create-topic TOPIC PARTITIONS [KEY=VALUE...]
  create-partitions TOPIC TOTAL
  list-topics
  describe-topics TOPIC...
  describe-topic-configs TOPIC...
  list-end-offsets TOPIC...

JSON on stdout. Any Kafka error (request, group, topic or partition level) exits 1 with
its name on stderr; the JSON is still printed when there is a per-item result.
`

// AdminArgs is the parsed command line.
type AdminArgs struct {
	Bootstrap []string
	Verb      string
	Args      []string
	States    []string // list-groups --states
}

// ParseAdmin reads the command line or exits 2 with the usage.
func ParseAdmin(program string) AdminArgs {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintf(os.Stderr, AdminUsage, program) }
	bootstrap := fs.String("bootstrap", "", "host:port[,host:port...]")
	if err := fs.Parse(os.Args[1:]); err != nil || *bootstrap == "" || fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	a := AdminArgs{Bootstrap: strings.Split(*bootstrap, ","), Verb: fs.Arg(0)}
	rest := fs.Args()[1:]
	if a.Verb == "list-groups" {
		sub := flag.NewFlagSet(program+" list-groups", flag.ContinueOnError)
		states := sub.String("states", "", "comma-separated states")
		if err := sub.Parse(rest); err != nil {
			os.Exit(2)
		}
		if *states != "" {
			a.States = strings.Split(*states, ",")
		}
		rest = sub.Args()
	}
	a.Args = rest
	return a
}

// Need exits 2 unless there are at least n arguments.
func (a AdminArgs) Need(n int, what string) {
	if len(a.Args) < n {
		fmt.Fprintf(os.Stderr, "%s needs %s\n", a.Verb, what)
		os.Exit(2)
	}
}

// TP is one topic partition, with an offset where the verb takes one.
type TP struct {
	Topic     string
	Partition int32
	Offset    int64
}

// ParseTPs reads TOPIC:PARTITION or, withOffset, TOPIC:PARTITION=OFFSET.
func ParseTPs(args []string, withOffset bool) []TP {
	var out []TP
	for _, arg := range args {
		spec, offset := arg, "0"
		if withOffset {
			var found bool
			if spec, offset, found = strings.Cut(arg, "="); !found {
				Usage("want TOPIC:PARTITION=OFFSET, not %q", arg)
			}
		}
		colon := strings.LastIndex(spec, ":")
		p, err1 := strconv.ParseInt(spec[colon+1:], 10, 32)
		o, err2 := strconv.ParseInt(offset, 10, 64)
		if colon < 1 || err1 != nil || err2 != nil {
			Usage("bad partition %q", arg)
		}
		out = append(out, TP{spec[:colon], int32(p), o})
	}
	return out
}

// Usage exits 2 with a message.
func Usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(2)
}

// Group is a described group, the same from both libraries.
type Group struct {
	Group        string   `json:"group"`
	Error        *string  `json:"error"`
	State        string   `json:"state"`
	ProtocolType string   `json:"protocol_type"`
	Protocol     string   `json:"protocol"`
	Members      []Member `json:"members"`
}

// Member is one member of a described group.
type Member struct {
	MemberID   string  `json:"member_id"`
	InstanceID *string `json:"instance_id"`
	ClientID   string  `json:"client_id"`
	ClientHost string  `json:"client_host"`
	Assignment [][]any `json:"assignment"`
}

// SortMembers orders members by client id, then member id, for stable output.
func SortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int {
		if c := strings.Compare(a.ClientID, b.ClientID); c != 0 {
			return c
		}
		return strings.Compare(a.MemberID, b.MemberID)
	})
}

// Result collects a verb's output and its Kafka errors.
type Result struct {
	errors []string
}

// Errorf records a Kafka error (exit status 1) without stopping.
func (r *Result) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Name records err (if any) under what, returning the error's name for the JSON (or nil).
func (r *Result) Name(what string, name string, err error) *string {
	if err == nil {
		return nil
	}
	r.Errorf("%s: %s (%v)", what, name, err)
	return &name
}

// Done prints out (unless nil) and exits: 1 with the errors on stderr if any were
// recorded, 0 otherwise.
func (r *Result) Done(out any) {
	if out != nil {
		line, err := json.Marshal(out)
		if err != nil {
			panic(err)
		}
		os.Stdout.Write(append(line, '\n')) //nolint:errcheck
	}
	if len(r.errors) > 0 {
		fmt.Fprintln(os.Stderr, strings.Join(r.errors, "\n"))
		os.Exit(1)
	}
	os.Exit(0)
}

// Fail exits 1 at once with a request-level error.
func Fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
