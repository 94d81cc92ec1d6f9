// Creates a topic on a real Kafka broker with the Java Admin client, then waits until the
// broker's metadata shows all its partitions, so consumers started next see the whole topic.
// It exists because kafka-tools (TopicCommand) is not published to Maven Central for 4.4.0.
//
//   java -cp <libs>/*:<classes> KafkaAdmin --bootstrap H:P --create-topic NAME --partitions N
//
// Exits 0 once the topic is visible, 1 (message on stderr) if it cannot be created.

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;

public final class KafkaAdmin {
    static {
        System.setOut(new PrintStream(new FileOutputStream(FileDescriptor.err), true));
    }

    private KafkaAdmin() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String name = args.get("create-topic");
        int partitions = Integer.parseInt(args.getOrDefault("partitions", "1"));
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all()
                .get(30, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (true) {
                try {
                    TopicDescription d = admin.describeTopics(List.of(name)).allTopicNames()
                        .get(10, TimeUnit.SECONDS).get(name);
                    if (d.partitions().size() == partitions
                            && d.partitions().stream().allMatch(p -> p.leader() != null)) {
                        return;
                    }
                } catch (Exception notYet) {
                    // UnknownTopicOrPartition until the broker has applied the record
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("topic " + name + " not visible after 30 s");
                }
                Thread.sleep(100);
            }
        } catch (Exception e) {
            System.err.println("KafkaAdmin: " + (e.getCause() != null ? e.getCause() : e));
            System.exit(1);
        }
    }
}
