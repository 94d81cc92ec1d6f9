// A real Java KafkaConsumer (classic group protocol) as a group member, for interop tests.
//
// It prints one JSON object per line on stdout, the same events as
// tests/integration/member.py:
//   {"event":"assigned","generation":3,"member_id":"...","partitions":[["t",0],...]}
//   {"event":"revoked","partitions":[...]}  {"event":"committed","offset":N,"partitions":[...]}
//   {"event":"commit_failed","error":"..."}  {"event":"closed"}
// Commands on stdin: "commit N" (commitSync offset N for every assigned partition) and
// "close" (close the consumer, which sends LeaveGroup). Logging goes to stderr only.
//
//   java -cp <libs>/*:<classes> JavaMember --bootstrap H:P --group G --topics a,b
//        --client-id X [--strategy range|roundrobin|sticky|cooperative-sticky]
//        [--instance-id Y] [--session-timeout-ms 4000] [--heartbeat-interval-ms 500]

import java.io.BufferedReader;
import java.io.InputStreamReader;
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
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaMember {
    private static final Map<String, String> STRATEGIES = Map.of(
        "range", "org.apache.kafka.clients.consumer.RangeAssignor",
        "roundrobin", "org.apache.kafka.clients.consumer.RoundRobinAssignor",
        "sticky", "org.apache.kafka.clients.consumer.StickyAssignor",
        "cooperative-sticky", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");

    private JavaMember() {}

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
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

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, args.get("client-id"));
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
            STRATEGIES.get(args.getOrDefault("strategy", "range")));
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args.getOrDefault("session-timeout-ms", "4000"));
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, args.getOrDefault("heartbeat-interval-ms", "500"));
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, args.getOrDefault("max-poll-interval-ms", "30000"));
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (args.containsKey("instance-id")) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args.get("instance-id"));
        }

        LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    commands.add(line.trim());
                }
            } catch (Exception ignored) {
                // stdin closed: fall through to close
            }
            commands.add("close");
        }, "stdin");
        reader.setDaemon(true);
        reader.start();

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
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
                public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
                    var meta = consumer.groupMetadata();
                    emit("{\"event\":\"assigned\",\"generation\":" + meta.generationId()
                        + ",\"member_id\":" + quote(meta.memberId())
                        + ",\"partitions\":" + partitions(consumer.assignment()) + "}");
                }
            };
            consumer.subscribe(Arrays.asList(args.get("topics").split(",")), listener);
            emit("{\"event\":\"started\"}");
            while (true) {
                consumer.poll(Duration.ofMillis(100));
                String command = commands.poll();
                if (command == null) {
                    continue;
                }
                if (command.equals("close")) {
                    break;
                }
                if (command.startsWith("commit ")) {
                    long offset = Long.parseLong(command.substring(7).trim());
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (TopicPartition tp : consumer.assignment()) {
                        offsets.put(tp, new OffsetAndMetadata(offset, ""));
                    }
                    try {
                        consumer.commitSync(offsets);
                        emit("{\"event\":\"committed\",\"offset\":" + offset
                            + ",\"partitions\":" + partitions(offsets.keySet()) + "}");
                    } catch (Exception e) {
                        emit("{\"event\":\"commit_failed\",\"error\":" + quote(e.toString()) + "}");
                    }
                }
            }
        }
        emit("{\"event\":\"closed\"}");
    }
}
