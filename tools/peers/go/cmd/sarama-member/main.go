// sarama-member: an IBM/sarama ConsumerGroup speaking member.py's protocol.
//
// Eager strategies end the session at every rebalance: Setup sees the whole new
// assignment and Cleanup the whole old one, so those are "assigned" and "revoked".
// cooperative-sticky keeps one session while its claims change and has no callback for
// the end of a rebalance. What it does have is OnAssignment (OnAssignmentBalanceStrategy),
// called with the generation and assignment the SyncGroup answered, before the claims
// are reconciled; the member waits (polling, only while one is pending) until the
// session reports that generation and those claims, so "assigned" is never a mix of an
// old assignment and a new generation.
//
// Commits: MarkOffset/ResetOffset then session.Commit(), which is synchronous but
// reports failures only on the Errors() channel; the member reads the group's offsets
// back (OffsetFetch through the ClusterAdmin on the same client) to say which it was.
//
// The Kafka version sarama assumes is SARAMA_KAFKA_VERSION (default 4.0.0, what kgroups'
// ApiVersions ranges look like); sarama also clamps each request to ApiVersions.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"kgroups/peers/internal/peer"
)

var strategies = map[string]func() sarama.BalanceStrategy{
	"range":              sarama.NewBalanceStrategyRange,
	"roundrobin":         sarama.NewBalanceStrategyRoundRobin,
	"sticky":             sarama.NewBalanceStrategySticky,
	"cooperative-sticky": sarama.NewBalanceStrategyCooperativeSticky,
}

// target is a generation's assignment as SyncGroup answered it.
type target struct {
	generation int32
	claims     peer.Partitions
}

type member struct {
	cooperative bool

	mu       sync.Mutex
	session  sarama.ConsumerGroupSession
	reported target // the last "assigned"
	pending  *target
	wake     chan struct{}

	errMu   sync.Mutex
	lastErr error
}

// observer wraps the cooperative-sticky strategy to learn each SyncGroup's answer. It
// forwards every optional interface the wrapped strategy has (all three).
type observer struct {
	sarama.BalanceStrategy
	m *member
}

func (o observer) SupportedProtocols() []sarama.RebalanceProtocol {
	return o.BalanceStrategy.(sarama.RebalanceProtocolBalanceStrategy).SupportedProtocols()
}

func (o observer) SubscriptionUserData(topics []string) ([]byte, error) {
	return o.BalanceStrategy.(sarama.SubscriptionUserDataBalanceStrategy).SubscriptionUserData(topics)
}

func (o observer) OnAssignment(a *sarama.ConsumerGroupMemberAssignment, generation int32) {
	o.BalanceStrategy.(sarama.OnAssignmentBalanceStrategy).OnAssignment(a, generation)
	o.m.mu.Lock()
	o.m.pending = &target{generation, peer.Partitions(a.Topics).Plus(nil)}
	o.m.mu.Unlock()
	select {
	case o.m.wake <- struct{}{}:
	default:
	}
}

// report emits "assigned" (and, cooperative, "revoked" for what went) once per
// (generation, assignment).
func (m *member) report(s sarama.ConsumerGroupSession, claims peer.Partitions) {
	now := target{s.GenerationID(), claims}
	m.mu.Lock()
	defer m.mu.Unlock()
	last := m.reported
	if last.generation == now.generation && last.claims.Key() == now.claims.Key() {
		return
	}
	m.reported = now
	added := claims
	if m.cooperative {
		if gone := last.claims.Minus(claims); !gone.Empty() {
			peer.Emit("revoked", map[string]any{"partitions": gone.List()})
		}
		added = claims.Minus(last.claims)
	}
	peer.Emit("assigned", map[string]any{
		"generation": now.generation, "member_id": s.MemberID(),
		"partitions": claims.List(), "added": added.List(),
	})
}

// settle reports a cooperative generation once the session has reconciled its claims
// with what SyncGroup answered. It polls only while a SyncGroup answer is pending.
func (m *member) settle(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		tick := time.NewTicker(20 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			m.mu.Lock()
			s, want := m.session, m.pending
			m.mu.Unlock()
			if s == nil || want == nil {
				waiting = want != nil
				continue
			}
			claims := peer.Partitions(s.Claims())
			if s.GenerationID() == want.generation && claims.Key() == want.claims.Key() {
				m.report(s, claims)
				m.mu.Lock()
				if m.pending == want {
					m.pending = nil
				}
				waiting = m.pending != nil
				m.mu.Unlock()
			} else if s.GenerationID() > want.generation {
				waiting = false // superseded before it settled; the next one will report
			}
		}
		tick.Stop()
	}
}

func (m *member) Setup(s sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	m.session = s
	m.mu.Unlock()
	m.report(s, peer.Partitions(s.Claims()).Plus(nil))
	return nil
}

func (m *member) Cleanup(s sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	m.session = nil
	m.reported = target{}
	m.mu.Unlock()
	peer.Emit("revoked", map[string]any{"partitions": peer.Partitions(s.Claims()).List()})
	return nil
}

func (m *member) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case _, ok := <-claim.Messages():
			if !ok {
				return nil // revoked (cooperative) or the session ended
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (m *member) commit(admin sarama.ClusterAdmin, group string, offset int64) {
	m.mu.Lock()
	s := m.session
	m.mu.Unlock()
	if s == nil {
		peer.Emit("commit_failed", map[string]any{"error": "no session: the group is rebalancing"})
		return
	}
	owned := peer.Partitions(s.Claims()).Plus(nil)
	for t, parts := range owned {
		for _, p := range parts {
			s.MarkOffset(t, p, offset, "")  // moves forward...
			s.ResetOffset(t, p, offset, "") // ...or back, and marks it dirty either way
		}
	}
	s.Commit()
	// Commit() reports nothing; read the group's offsets back to know.
	back, err := admin.ListConsumerGroupOffsets(group, owned)
	if err == nil && back.Err != sarama.ErrNoError {
		err = back.Err
	}
	for t, parts := range owned {
		for _, p := range parts {
			if err != nil {
				break
			}
			block := back.GetBlock(t, p)
			switch {
			case block == nil:
				err = fmt.Errorf("%s[%d]: no offset read back", t, p)
			case block.Err != sarama.ErrNoError:
				err = fmt.Errorf("%s[%d]: %w", t, p, block.Err)
			case block.Offset != offset:
				err = fmt.Errorf("%s[%d]: read back %d (%v)", t, p, block.Offset, m.lastError())
			}
		}
	}
	if err != nil {
		peer.Emit("commit_failed", map[string]any{"error": err.Error()})
		return
	}
	peer.Emit("committed", map[string]any{"offset": offset, "partitions": owned.List()})
}

func (m *member) lastError() error {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.lastErr
}

func kafkaVersion() sarama.KafkaVersion {
	name := os.Getenv("SARAMA_KAFKA_VERSION")
	if name == "" {
		return sarama.V4_0_0_0
	}
	v, err := sarama.ParseKafkaVersion(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sarama-member: SARAMA_KAFKA_VERSION:", err)
		os.Exit(2)
	}
	return v
}

func main() {
	args := peer.ParseArgs("sarama-member")
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	m := &member{cooperative: args.Strategy == "cooperative-sticky", wake: make(chan struct{}, 1)}

	cfg := sarama.NewConfig()
	cfg.ClientID = args.ClientID
	cfg.Version = kafkaVersion()
	cfg.Metadata.RefreshFrequency = args.MetadataMaxAge
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.Session.Timeout = args.SessionTimeout
	cfg.Consumer.Group.Heartbeat.Interval = args.Heartbeat
	cfg.Consumer.Group.Rebalance.Timeout = args.MaxPoll
	strategy := strategies[args.Strategy]()
	if m.cooperative {
		strategy = observer{strategy, m}
	}
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}
	if args.InstanceID != "" {
		cfg.Consumer.Group.InstanceId = args.InstanceID
	}

	client, err := sarama.NewClient(args.Bootstrap, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sarama-member:", err)
		os.Exit(2)
	}
	group, err := sarama.NewConsumerGroupFromClient(args.Group, client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sarama-member:", err)
		os.Exit(2)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sarama-member:", err)
		os.Exit(2)
	}
	peer.Emit("started", nil)

	ctx, stop := context.WithCancel(context.Background())
	go func() {
		for err := range group.Errors() {
			fmt.Fprintln(os.Stderr, "sarama-member: group error:", err)
			m.errMu.Lock()
			m.lastErr = err
			m.errMu.Unlock()
		}
	}()
	if m.cooperative {
		go m.settle(ctx)
	}
	consuming := make(chan struct{})
	go func() {
		defer close(consuming)
		for ctx.Err() == nil {
			// Consume returns at the end of each eager session; an application loops.
			err := group.Consume(ctx, args.Topics, m)
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "sarama-member: consume:", err)
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}()

	for command := range peer.Commands() {
		if command == "close" {
			break
		}
		if offset, ok := peer.ParseCommit(command); ok {
			m.commit(admin, args.Group, offset)
		}
	}
	// Close ends the session (Cleanup), then sends LeaveGroup (not for a static member,
	// as KIP-345 wants).
	if err := group.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "sarama-member: close:", err)
	}
	stop()
	<-consuming
	_ = client.Close()
	peer.Emit("closed", nil)
}
