// sarama-admin: the admin verbs of internal/peer/admin.go through sarama's ClusterAdmin.
//
// ClusterAdmin has no state filter for listing groups, so list-groups --states sends
// sarama's own ListGroupsRequest (v4+ carries StatesFilter) to every broker, as
// ListConsumerGroups does without one. Sarama's errors are numbers with prose; their
// wire names come from franz-go's kerr table, which is only a table of names here.
package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"kgroups/peers/internal/peer"
)

// code finds the Kafka error code in one of sarama's errors.
func code(err error) (int16, bool) {
	var ke sarama.KError
	var te *sarama.TopicError
	var tpe *sarama.TopicPartitionError
	switch {
	case errors.As(err, &te):
		return int16(te.Err), true
	case errors.As(err, &tpe):
		return int16(tpe.Err), true
	case errors.As(err, &ke):
		return int16(ke), true
	}
	return 0, false
}

// name is a Kafka error's wire name (UNKNOWN_TOPIC_OR_PARTITION...), or the error text.
func name(err error) string {
	if c, ok := code(err); ok {
		var ke *kerr.Error
		if errors.As(kerr.ErrorForCode(c), &ke) {
			return ke.Message
		}
		return fmt.Sprintf("KAFKA_ERROR_%d", c)
	}
	return err.Error()
}

// kafkaErr is nil for sarama.ErrNoError, the error otherwise: sarama keeps per-item
// errors as KError values with 0 meaning none, sometimes inside an error interface.
func kafkaErr(err error) error {
	if k, ok := err.(sarama.KError); ok && k == sarama.ErrNoError {
		return nil
	}
	return err
}

func check(what string, err error) {
	if err != nil {
		peer.Fail("%s: %s (%v)", what, name(err), err)
	}
}

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "sarama-admin"
	cfg.Version = sarama.V4_0_0_0
	if v := os.Getenv("SARAMA_KAFKA_VERSION"); v != "" {
		version, err := sarama.ParseKafkaVersion(v)
		check("SARAMA_KAFKA_VERSION", err)
		cfg.Version = version
	}
	return cfg
}

func main() {
	a := peer.ParseAdmin("sarama-admin")
	client, err := sarama.NewClient(a.Bootstrap, config())
	check("client", err)
	adm, err := sarama.NewClusterAdminFromClient(client)
	check("admin", err)
	r := &peer.Result{}
	note := func(what string, err error) *string {
		if err == nil {
			return nil
		}
		return r.Name(what, name(err), err)
	}

	switch a.Verb {
	case "list-groups":
		groups := []map[string]any{}
		if len(a.States) == 0 {
			listed, err := adm.ListConsumerGroups()
			check("list groups", err)
			for _, g := range slices.Sorted(maps.Keys(listed)) {
				groups = append(groups, map[string]any{
					"group": g, "protocol_type": listed[g], "state": "",
				})
			}
		} else {
			for _, b := range client.Brokers() {
				_ = b.Open(client.Config()) // already open is fine
				resp, err := b.ListGroups(&sarama.ListGroupsRequest{Version: 5, StatesFilter: a.States})
				check("list groups", err)
				check("list groups", kafkaErr(resp.Err))
				for _, g := range slices.Sorted(maps.Keys(resp.Groups)) {
					groups = append(groups, map[string]any{
						"group": g, "protocol_type": resp.Groups[g],
						"state": resp.GroupsData[g].GroupState,
					})
				}
			}
		}
		r.Done(map[string]any{"groups": groups})

	case "describe-groups":
		a.Need(1, "GROUP...")
		described, err := adm.DescribeConsumerGroups(a.Args)
		check("describe groups", err)
		groups := []peer.Group{}
		for _, d := range described {
			g := peer.Group{
				Group: d.GroupId, Error: note(d.GroupId, kafkaErr(d.Err)), State: d.State,
				ProtocolType: d.ProtocolType, Protocol: d.Protocol, Members: []peer.Member{},
			}
			for _, m := range d.Members {
				owned := peer.Partitions{}
				if d.ProtocolType == "consumer" && len(m.MemberAssignment) > 0 {
					assignment, err := m.GetMemberAssignment()
					check("decode assignment of "+m.MemberId, err)
					owned = assignment.Topics
				}
				g.Members = append(g.Members, peer.Member{
					MemberID: m.MemberId, InstanceID: m.GroupInstanceId, ClientID: m.ClientId,
					ClientHost: m.ClientHost, Assignment: owned.List(),
				})
			}
			peer.SortMembers(g.Members)
			groups = append(groups, g)
		}
		slices.SortFunc(groups, func(x, y peer.Group) int { return strings.Compare(x.Group, y.Group) })
		r.Done(map[string]any{"groups": groups})

	case "list-group-offsets":
		a.Need(1, "GROUP")
		fetched, err := adm.ListConsumerGroupOffsets(a.Args[0], nil)
		check("fetch offsets", err)
		check("fetch offsets", kafkaErr(fetched.Err))
		offsets := [][]any{}
		for _, t := range slices.Sorted(maps.Keys(fetched.Blocks)) {
			for _, p := range slices.Sorted(maps.Keys(fetched.Blocks[t])) {
				b := fetched.Blocks[t][p]
				if note(fmt.Sprintf("%s[%d]", t, p), kafkaErr(b.Err)) == nil && b.Offset >= 0 {
					offsets = append(offsets, []any{t, p, b.Offset})
				}
			}
		}
		r.Done(map[string]any{"offsets": offsets})

	case "alter-group-offsets":
		a.Need(2, "GROUP TOPIC:PARTITION=OFFSET...")
		offsets := map[string]map[int32]sarama.OffsetAndMetadata{}
		for _, tp := range peer.ParseTPs(a.Args[1:], true) {
			if offsets[tp.Topic] == nil {
				offsets[tp.Topic] = map[int32]sarama.OffsetAndMetadata{}
			}
			offsets[tp.Topic][tp.Partition] = sarama.OffsetAndMetadata{Offset: tp.Offset, LeaderEpoch: -1}
		}
		committed, err := adm.AlterConsumerGroupOffsets(a.Args[0], offsets, nil)
		check("commit offsets", err)
		results := [][]any{}
		for _, t := range slices.Sorted(maps.Keys(committed.Errors)) {
			for _, p := range slices.Sorted(maps.Keys(committed.Errors[t])) {
				what := fmt.Sprintf("%s[%d]", t, p)
				results = append(results, []any{t, p, note(what, kafkaErr(committed.Errors[t][p]))})
			}
		}
		r.Done(map[string]any{"results": results})

	case "delete-group-offsets":
		a.Need(2, "GROUP TOPIC:PARTITION...")
		results := [][]any{}
		for _, tp := range peer.ParseTPs(a.Args[1:], false) {
			err := adm.DeleteConsumerGroupOffset(a.Args[0], tp.Topic, tp.Partition)
			what := fmt.Sprintf("%s[%d]", tp.Topic, tp.Partition)
			results = append(results, []any{tp.Topic, tp.Partition, note(what, err)})
		}
		r.Done(map[string]any{"results": results})

	case "delete-group":
		a.Need(1, "GROUP")
		check("delete group "+a.Args[0], adm.DeleteConsumerGroup(a.Args[0]))
		r.Done(map[string]any{"group": a.Args[0]})

	case "remove-members":
		a.Need(2, "GROUP INSTANCE_ID...")
		left, err := adm.RemoveMemberFromConsumerGroup(a.Args[0], a.Args[1:])
		check("leave group", err)
		check("leave group", kafkaErr(left.Err))
		results := [][]any{}
		for _, m := range left.Members {
			id := ""
			if m.GroupInstanceId != nil {
				id = *m.GroupInstanceId
			}
			results = append(results, []any{id, note(id, kafkaErr(m.Err))})
		}
		slices.SortFunc(results, func(x, y []any) int { return strings.Compare(x[0].(string), y[0].(string)) })
		r.Done(map[string]any{"results": results})

	case "create-topic":
		a.Need(2, "TOPIC PARTITIONS [KEY=VALUE...]")
		partitions, err := strconv.Atoi(a.Args[1])
		if err != nil {
			peer.Usage("PARTITIONS: %v", err)
		}
		detail := &sarama.TopicDetail{
			NumPartitions: int32(partitions), ReplicationFactor: -1,
			ConfigEntries: map[string]*string{},
		}
		for _, kv := range a.Args[2:] {
			k, v, _ := strings.Cut(kv, "=")
			detail.ConfigEntries[k] = &v
		}
		check("create topic "+a.Args[0], adm.CreateTopic(a.Args[0], detail, false))
		r.Done(map[string]any{"topic": a.Args[0], "partitions": partitions})

	case "create-partitions":
		a.Need(2, "TOPIC TOTAL")
		total, err := strconv.Atoi(a.Args[1])
		if err != nil {
			peer.Usage("TOTAL: %v", err)
		}
		check("create partitions "+a.Args[0], adm.CreatePartitions(a.Args[0], int32(total), nil, false))
		r.Done(map[string]any{"topic": a.Args[0], "partitions": total})

	case "list-topics":
		topics, err := adm.ListTopics() // Metadata, then DescribeConfigs of every topic
		check("list topics", err)
		out := map[string]int32{}
		for t, d := range topics {
			out[t] = d.NumPartitions
		}
		r.Done(map[string]any{"topics": out})

	case "describe-topics":
		a.Need(1, "TOPIC...")
		meta, err := adm.DescribeTopics(a.Args)
		check("metadata", err)
		out := map[string]any{}
		for _, t := range meta {
			out[t.Name] = map[string]any{"partitions": len(t.Partitions), "error": note(t.Name, kafkaErr(t.Err))}
		}
		brokers, _, err := adm.DescribeCluster()
		check("describe cluster", err)
		r.Done(map[string]any{"topics": out, "brokers": len(brokers)})

	case "describe-topic-configs":
		a.Need(1, "TOPIC...")
		out := map[string]map[string]*string{}
		for _, t := range a.Args {
			entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: t})
			if note(t, err) != nil {
				continue
			}
			out[t] = map[string]*string{}
			for _, e := range entries {
				value := e.Value
				if e.Sensitive {
					out[t][e.Name] = nil
				} else {
					out[t][e.Name] = &value
				}
			}
		}
		r.Done(map[string]any{"configs": out})

	case "list-end-offsets":
		a.Need(1, "TOPIC...")
		meta, err := adm.DescribeTopics(a.Args)
		check("metadata", err)
		want := map[string]map[int32]int64{}
		for _, t := range meta {
			if note(t.Name, kafkaErr(t.Err)) != nil {
				continue
			}
			want[t.Name] = map[int32]int64{}
			for _, p := range t.Partitions {
				want[t.Name][p.ID] = sarama.OffsetNewest
			}
		}
		listed, err := adm.ListOffsets(want, nil)
		check("list offsets", err)
		offsets := [][]any{}
		for _, t := range slices.Sorted(maps.Keys(listed)) {
			for _, p := range slices.Sorted(maps.Keys(listed[t])) {
				o := listed[t][p]
				if note(fmt.Sprintf("%s[%d]", t, p), kafkaErr(o.Err)) == nil {
					offsets = append(offsets, []any{t, p, o.Offset})
				}
			}
		}
		r.Done(map[string]any{"offsets": offsets})

	default:
		peer.Usage("unknown verb %q (see --help)", a.Verb)
	}
}
