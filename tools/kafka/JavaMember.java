// A real Java KafkaConsumer as a group member, for interop tests: the reference client
// every other one imitates, so kgroups is checked against it.
//
//   java -cp <libs>/*:<classes> JavaMember --bootstrap H:P --group G --topics a,b
//        --client-id X [--strategy range|roundrobin|sticky|cooperative-sticky]
//        [--instance-id Y] [--session-timeout-ms 6000] [--heartbeat-interval-ms 1000]
//        [--max-poll-interval-ms 30000] [--commit N]
//        [--group-protocol classic|consumer] [--remote-assignor uniform|range]
//        [--pattern REGEX]
//
// With --group-protocol consumer (Kafka 4's KIP-848 protocol) the coordinator assigns:
// --strategy, --session-timeout-ms and --heartbeat-interval-ms are not sent (the client
// refuses them), --remote-assignor names the server-side assignor, and "generation" in
// the events is the member epoch. --pattern (consumer protocol) subscribes to a
// SubscriptionPattern, which the coordinator resolves (RE2J, whole-name match) instead of
// --topics.
//
// It prints one JSON object per line on stdout (flushed), and nothing else goes there:
//   {"event":"started"}
//   {"event":"assigned","generation":3,"member_id":"...","partitions":[["t",0],...],"added":[...]}
//       partitions = the whole assignment after the callback (what the member owns now),
//       added = what the callback was given (differs from partitions only when cooperative)
//   {"event":"revoked","partitions":[...]}   {"event":"lost","partitions":[...]}
//   {"event":"generation","generation":N,"member_id":"...","partitions":[...]}
//       after a poll where the assignment is non-empty and the generation changed
//   {"event":"committed","offset":N,"partitions":[...]}   {"event":"commit_failed","error":"..."}
//   {"event":"closed"}
// With --commit N it commits offset N (commitSync) for every assigned partition after each
// assignment. Commands on stdin: "commit N" (the same, once) and "close". "close", end of
// stdin (the parent is gone, so no orphan JVM stays in the group) and SIGTERM all call
// consumer.close(), which sends LeaveGroup, print "closed" and exit 0. Run it with a pipe on
// stdin: started with stdin at /dev/null it leaves at once.

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.LinkedBlockingQueue;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaMember {
    // The events' own stream. System.out is pointed at stderr before any logger exists, so
    // a console appender (log4j's default one included) can never corrupt the JSON lines.
    private static final PrintStream EVENTS =
        new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    static {
        System.setOut(System.err);
    }

    private static final Map<String, String> STRATEGIES = Map.of(
        "range", "org.apache.kafka.clients.consumer.RangeAssignor",
        "roundrobin", "org.apache.kafka.clients.consumer.RoundRobinAssignor",
        "sticky", "org.apache.kafka.clients.consumer.StickyAssignor",
        "cooperative-sticky", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");

    private static final LinkedBlockingQueue<String> COMMANDS = new LinkedBlockingQueue<>();

    private JavaMember() {}

    static synchronized void emit(String json) {
        EVENTS.println(json);
        EVENTS.flush();
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
    }

    static String partitions(Collection<TopicPartition> tps) {
        List<TopicPartition> sorted = new ArrayList<>(tps);
        sorted.sort((a, b) -> a.topic().equals(b.topic())
            ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : sorted) {
            out.add("[" + quote(tp.topic()) + "," + tp.partition() + "]");
        }
        return "[" + String.join(",", out) + "]";
    }

    static void commit(KafkaConsumer<byte[], byte[]> consumer, long offset) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : consumer.assignment()) {
            offsets.put(tp, new OffsetAndMetadata(offset, ""));
        }
        try {
            consumer.commitSync(offsets);
            emit("{\"event\":\"committed\",\"offset\":" + offset
                + ",\"partitions\":" + partitions(offsets.keySet()) + "}");
        } catch (WakeupException e) {
            throw e;
        } catch (Exception e) {
            emit("{\"event\":\"commit_failed\",\"error\":" + quote(e.toString()) + "}");
        }
    }

    public static void main(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        for (String required : List.of("bootstrap", "group", "topics", "client-id")) {
            if (!args.containsKey(required)) {
                System.err.println("JavaMember: --" + required + " is required");
                System.exit(2);
            }
        }
        String strategy = STRATEGIES.get(args.getOrDefault("strategy", "range"));
        if (strategy == null) {
            System.err.println("JavaMember: unknown --strategy " + args.get("strategy"));
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, args.get("client-id"));
        String protocol = args.getOrDefault("group-protocol", "classic");
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, strategy);
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args.getOrDefault("session-timeout-ms", "6000"));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, args.getOrDefault("heartbeat-interval-ms", "1000"));
        } else if (args.containsKey("remote-assignor")) {
            props.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, args.get("remote-assignor"));
        }
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, args.getOrDefault("max-poll-interval-ms", "30000"));
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // Short enough that a test notices a dead coordinator quickly, long enough for CI.
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        props.put(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        props.put(ConsumerConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        props.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (args.containsKey("instance-id")) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args.get("instance-id"));
        }
        // --prop.NAME VALUE: any other consumer setting (security.protocol, sasl.jaas.config...).
        for (Map.Entry<String, String> e : args.entrySet()) {
            if (e.getKey().startsWith("prop.")) {
                props.put(e.getKey().substring("prop.".length()), e.getValue());
            }
        }
        Long commitEach = args.containsKey("commit") ? Long.valueOf(args.get("commit")) : null;

        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    COMMANDS.add(line.trim());
                }
            } catch (Exception ignored) {
                // unreadable stdin: treated like its end
            }
            COMMANDS.add("close");
        }, "stdin");
        reader.setDaemon(true);
        reader.start();

        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        // Handling TERM ourselves (instead of a shutdown hook) lets the main thread close the
        // consumer, which is not thread-safe, and exit 0; wakeup() is the one thread-safe call.
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), signal -> {
            COMMANDS.add("close");
            consumer.wakeup();
        });

        boolean[] assignedSinceCommit = {false};
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                emit("{\"event\":\"revoked\",\"partitions\":" + partitions(revoked) + "}");
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> lost) {
                emit("{\"event\":\"lost\",\"partitions\":" + partitions(lost) + "}");
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> added) {
                ConsumerGroupMetadata meta = consumer.groupMetadata();
                emit("{\"event\":\"assigned\",\"generation\":" + meta.generationId()
                    + ",\"member_id\":" + quote(meta.memberId())
                    + ",\"partitions\":" + partitions(consumer.assignment())
                    + ",\"added\":" + partitions(added) + "}");
                assignedSinceCommit[0] = true;
            }
        };
        if (args.containsKey("pattern")) {
            consumer.subscribe(new SubscriptionPattern(args.get("pattern")), listener);
        } else {
            consumer.subscribe(Arrays.asList(args.get("topics").split(",")), listener);
        }
        emit("{\"event\":\"started\"}");

        int lastGeneration = -1;
        boolean running = true;
        while (running) {
            try {
                consumer.poll(Duration.ofMillis(100));
                ConsumerGroupMetadata meta = consumer.groupMetadata();
                if (!consumer.assignment().isEmpty() && meta.generationId() != lastGeneration) {
                    lastGeneration = meta.generationId();
                    emit("{\"event\":\"generation\",\"generation\":" + lastGeneration
                        + ",\"member_id\":" + quote(meta.memberId())
                        + ",\"partitions\":" + partitions(consumer.assignment()) + "}");
                }
                if (commitEach != null && assignedSinceCommit[0] && !consumer.assignment().isEmpty()) {
                    assignedSinceCommit[0] = false;
                    commit(consumer, commitEach);
                }
                String command;
                while (running && (command = COMMANDS.poll()) != null) {
                    if (command.equals("close")) {
                        running = false;
                    } else if (command.startsWith("commit ")) {
                        commit(consumer, Long.parseLong(command.substring(7).trim()));
                    }
                }
            } catch (WakeupException e) {
                // SIGTERM: the "close" it queued is read on the next turn
            }
        }
        consumer.close();
        emit("{\"event\":\"closed\"}");
        System.exit(0);
    }
}
