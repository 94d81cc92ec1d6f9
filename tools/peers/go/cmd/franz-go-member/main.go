// franz-go-member: a franz-go (kgo) group consumer speaking member.py's protocol.
//
// kgo calls OnPartitionsAssigned after every sync, even when nothing was added (its
// docs promise it), with only what was added when the balancer is cooperative; the
// member keeps the whole assignment itself, as kgo's callbacks describe it, and reports
// it with the generation kgo stored at the join. Records are polled as an application
// polls them; auto-commit is off and "commit N" commits synchronously through kgo's
// CommitOffsetsSync, inside the current generation.
//
// With --group-protocol consumer it speaks Kafka 4's consumer protocol (KIP-848,
// kgo.ServerSideBalancer: sticky and cooperative-sticky ask for the server's "uniform"
// assignor, range for "range"); the coordinator then sets the timeouts, and since a
// member's epoch moves without a callback when nothing of its own changes, a
// "generation" event reports each new epoch while it holds partitions. --pattern
// subscribes to the topics a regular expression matches (kgo.ConsumeRegex).
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kgroups/peers/internal/peer"
)

var balancers = map[string]func() kgo.GroupBalancer{
	"range":              kgo.RangeBalancer,
	"roundrobin":         kgo.RoundRobinBalancer,
	"sticky":             kgo.StickyBalancer,
	"cooperative-sticky": kgo.CooperativeStickyBalancer,
}

type member struct {
	mu    sync.Mutex
	owned peer.Partitions
}

func (m *member) assigned(_ context.Context, cl *kgo.Client, added map[string][]int32) {
	m.mu.Lock()
	m.owned = m.owned.Plus(added)
	now := m.owned.List()
	m.mu.Unlock()
	memberID, generation := cl.GroupMetadata()
	peer.Emit("assigned", map[string]any{
		"generation": generation, "member_id": memberID,
		"partitions": now, "added": peer.Partitions(added).List(),
	})
}

func (m *member) taken(event string) func(context.Context, *kgo.Client, map[string][]int32) {
	return func(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
		m.mu.Lock()
		m.owned = m.owned.Minus(gone)
		m.mu.Unlock()
		peer.Emit(event, map[string]any{"partitions": peer.Partitions(gone).List()})
	}
}

func (m *member) commit(cl *kgo.Client, offset int64) {
	m.mu.Lock()
	owned := m.owned.Plus(nil)
	m.mu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for t, parts := range owned {
		offsets[t] = map[int32]kgo.EpochOffset{}
		for _, p := range parts {
			offsets[t][p] = kgo.EpochOffset{Epoch: -1, Offset: offset}
		}
	}
	var failed error
	cl.CommitOffsetsSync(context.Background(), offsets,
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				failed = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						failed = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err)
					}
				}
			}
		})
	if failed != nil {
		peer.Emit("commit_failed", map[string]any{"error": failed.Error()})
		return
	}
	peer.Emit("committed", map[string]any{"offset": offset, "partitions": owned.List()})
}

// watchEpoch reports the member epoch each time it moves while partitions are held.
func (m *member) watchEpoch(cl *kgo.Client) {
	last := int32(-1)
	for range time.Tick(100 * time.Millisecond) {
		m.mu.Lock()
		now := m.owned.List()
		m.mu.Unlock()
		memberID, epoch := cl.GroupMetadata()
		if len(now) > 0 && epoch != last {
			last = epoch
			peer.Emit("generation", map[string]any{
				"generation": epoch, "member_id": memberID, "partitions": now,
			})
		}
	}
}

func main() {
	args := peer.ParseArgs("franz-go-member")
	m := &member{owned: peer.Partitions{}}
	opts := []kgo.Opt{
		kgo.SeedBrokers(args.Bootstrap...),
		kgo.ClientID(args.ClientID),
		kgo.ConsumerGroup(args.Group),
		kgo.ConsumeTopics(args.Topics...),
		kgo.Balancers(balancers[args.Strategy]()),
		kgo.RebalanceTimeout(args.MaxPoll),
		kgo.MetadataMaxAge(args.MetadataMaxAge),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(m.assigned),
		kgo.OnPartitionsRevoked(m.taken("revoked")),
		kgo.OnPartitionsLost(m.taken("lost")),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
	}
	if args.GroupProtocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
	} else {
		opts = append(opts, kgo.SessionTimeout(args.SessionTimeout),
			kgo.HeartbeatInterval(args.Heartbeat))
	}
	if args.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(args.InstanceID))
	}
	if args.Pattern != "" {
		// kgo matches a regex anywhere in a name; anchored, it means the whole name, as
		// the consumer protocol's coordinator matches it (franz-go sends it as ".*(?:re).*").
		opts = append(opts, kgo.ConsumeTopics("^(?:"+args.Pattern+")$"), kgo.ConsumeRegex())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "franz-go-member:", err)
		os.Exit(2)
	}
	peer.Emit("started", nil)
	if args.GroupProtocol == "consumer" {
		go m.watchEpoch(cl)
	}

	polling := make(chan struct{})
	go func() {
		defer close(polling)
		for {
			fetches := cl.PollFetches(context.Background())
			if fetches.IsClientClosed() {
				return
			}
			fetches.EachError(func(t string, p int32, err error) {
				fmt.Fprintf(os.Stderr, "franz-go-member: fetch %s[%d]: %v\n", t, p, err)
			})
		}
	}()

	for command := range peer.Commands() {
		if command == "close" {
			break
		}
		if offset, ok := peer.ParseCommit(command); ok {
			m.commit(cl, offset)
		}
	}
	cl.Close() // leaves the group (a static member stays, as KIP-345 wants)
	<-polling
	peer.Emit("closed", nil)
}
