// franz-go-admin: the admin verbs of internal/peer/admin.go through franz-go's kadm.
package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"kgroups/peers/internal/peer"
)

// name is a Kafka error's wire name (UNKNOWN_TOPIC_OR_PARTITION...), or the error text.
func name(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

func check(what string, err error) {
	if err != nil {
		peer.Fail("%s: %s (%v)", what, name(err), err)
	}
}

func main() {
	a := peer.ParseAdmin("franz-go-admin")
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.Bootstrap...), kgo.ClientID("franz-go-admin"))
	check("client", err)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &peer.Result{}
	note := func(what string, err error) *string { return r.Name(what, nameOrEmpty(err), err) }

	switch a.Verb {
	case "list-groups":
		listed, err := adm.ListGroups(ctx, a.States...)
		check("list groups", err)
		groups := []map[string]any{}
		for _, g := range listed.Sorted() {
			groups = append(groups, map[string]any{
				"group": g.Group, "protocol_type": g.ProtocolType, "state": g.State,
			})
		}
		r.Done(map[string]any{"groups": groups})

	case "describe-groups":
		a.Need(1, "GROUP...")
		described, err := adm.DescribeGroups(ctx, a.Args...)
		check("describe groups", err)
		groups := []peer.Group{}
		for _, d := range described.Sorted() {
			g := peer.Group{
				Group: d.Group, Error: note(d.Group, d.Err), State: d.State,
				ProtocolType: d.ProtocolType, Protocol: d.Protocol, Members: []peer.Member{},
			}
			for _, m := range d.Members {
				owned := peer.Partitions{}
				if c, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range c.Topics {
						owned[t.Topic] = t.Partitions
					}
				}
				g.Members = append(g.Members, peer.Member{
					MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID,
					ClientHost: m.ClientHost, Assignment: owned.List(),
				})
			}
			peer.SortMembers(g.Members)
			groups = append(groups, g)
		}
		r.Done(map[string]any{"groups": groups})

	case "list-group-offsets":
		a.Need(1, "GROUP")
		fetched, err := adm.FetchOffsets(ctx, a.Args[0])
		check("fetch offsets", err)
		offsets := [][]any{}
		for _, o := range fetched.Sorted() {
			if o.Err != nil {
				note(fmt.Sprintf("%s[%d]", o.Topic, o.Partition), o.Err)
				continue
			}
			offsets = append(offsets, []any{o.Topic, o.Partition, o.At})
		}
		r.Done(map[string]any{"offsets": offsets})

	case "alter-group-offsets":
		a.Need(2, "GROUP TOPIC:PARTITION=OFFSET...")
		offs := kadm.Offsets{}
		for _, tp := range peer.ParseTPs(a.Args[1:], true) {
			offs.Add(kadm.Offset{Topic: tp.Topic, Partition: tp.Partition, At: tp.Offset, LeaderEpoch: -1})
		}
		committed, err := adm.CommitOffsets(ctx, a.Args[0], offs)
		check("commit offsets", err)
		results := [][]any{}
		for _, o := range committed.Sorted() {
			what := fmt.Sprintf("%s[%d]", o.Topic, o.Partition)
			results = append(results, []any{o.Topic, o.Partition, note(what, o.Err)})
		}
		r.Done(map[string]any{"results": results})

	case "delete-group-offsets":
		a.Need(2, "GROUP TOPIC:PARTITION...")
		set := kadm.TopicsSet{}
		for _, tp := range peer.ParseTPs(a.Args[1:], false) {
			set.Add(tp.Topic, tp.Partition)
		}
		deleted, err := adm.DeleteOffsets(ctx, a.Args[0], set)
		check("delete offsets", err)
		results := [][]any{}
		for _, t := range slices.Sorted(maps.Keys(deleted)) {
			for _, p := range slices.Sorted(maps.Keys(deleted[t])) {
				what := fmt.Sprintf("%s[%d]", t, p)
				results = append(results, []any{t, p, note(what, deleted[t][p])})
			}
		}
		r.Done(map[string]any{"results": results})

	case "delete-group":
		a.Need(1, "GROUP")
		deleted, err := adm.DeleteGroup(ctx, a.Args[0])
		check("delete group", err)
		check("delete group "+a.Args[0], deleted.Err)
		r.Done(map[string]any{"group": deleted.Group})

	case "remove-members":
		a.Need(2, "GROUP INSTANCE_ID...")
		left, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(a.Args[0]).InstanceIDs(a.Args[1:]...))
		check("leave group", err)
		results := [][]any{}
		for _, l := range left.Sorted() {
			results = append(results, []any{l.InstanceID, note(l.InstanceID, l.Err)})
		}
		r.Done(map[string]any{"results": results})

	case "create-topic":
		a.Need(2, "TOPIC PARTITIONS [KEY=VALUE...]")
		partitions, err := strconv.Atoi(a.Args[1])
		if err != nil {
			peer.Usage("PARTITIONS: %v", err)
		}
		configs := map[string]*string{}
		for _, kv := range a.Args[2:] {
			k, v, _ := strings.Cut(kv, "=")
			configs[k] = kadm.StringPtr(v)
		}
		created, err := adm.CreateTopic(ctx, int32(partitions), -1, configs, a.Args[0])
		check("create topic", err)
		check("create topic "+a.Args[0], created.Err)
		r.Done(map[string]any{"topic": created.Topic, "partitions": created.NumPartitions})

	case "create-partitions":
		a.Need(2, "TOPIC TOTAL")
		total, err := strconv.Atoi(a.Args[1])
		if err != nil {
			peer.Usage("TOTAL: %v", err)
		}
		updated, err := adm.UpdatePartitions(ctx, total, a.Args[0])
		check("create partitions", err)
		one, err := updated.On(a.Args[0], nil)
		check("create partitions "+a.Args[0], err)
		check("create partitions "+a.Args[0], one.Err)
		r.Done(map[string]any{"topic": one.Topic, "partitions": total})

	case "list-topics":
		topics, err := adm.ListTopics(ctx)
		check("list topics", err)
		out := map[string]int{}
		for _, t := range topics.Sorted() {
			out[t.Topic] = len(t.Partitions)
		}
		r.Done(map[string]any{"topics": out})

	case "describe-topics":
		a.Need(1, "TOPIC...")
		meta, err := adm.Metadata(ctx, a.Args...)
		check("metadata", err)
		out := map[string]any{}
		for _, t := range a.Args {
			d, ok := meta.Topics[t]
			if !ok {
				out[t] = map[string]any{"partitions": 0, "error": note(t, errors.New("not in the answer"))}
				continue
			}
			out[t] = map[string]any{"partitions": len(d.Partitions), "error": note(t, d.Err)}
		}
		r.Done(map[string]any{"topics": out, "brokers": len(meta.Brokers)})

	case "describe-topic-configs":
		a.Need(1, "TOPIC...")
		described, err := adm.DescribeTopicConfigs(ctx, a.Args...)
		check("describe configs", err)
		out := map[string]map[string]*string{}
		for _, rc := range described {
			if note(rc.Name, rc.Err) != nil {
				continue
			}
			out[rc.Name] = map[string]*string{}
			for _, c := range rc.Configs {
				out[rc.Name][c.Key] = c.Value
			}
		}
		r.Done(map[string]any{"configs": out})

	case "list-end-offsets":
		a.Need(1, "TOPIC...")
		listed, err := adm.ListEndOffsets(ctx, a.Args...)
		check("list offsets", err)
		offsets := [][]any{}
		listed.Each(func(o kadm.ListedOffset) {
			if note(fmt.Sprintf("%s[%d]", o.Topic, o.Partition), o.Err) == nil {
				offsets = append(offsets, []any{o.Topic, o.Partition, o.Offset})
			}
		})
		slices.SortFunc(offsets, func(x, y []any) int {
			if c := strings.Compare(x[0].(string), y[0].(string)); c != 0 {
				return c
			}
			return int(x[1].(int32) - y[1].(int32))
		})
		r.Done(map[string]any{"offsets": offsets})

	default:
		peer.Usage("unknown verb %q (see --help)", a.Verb)
	}
}

func nameOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return name(err)
}
