// Runs Kafka's own StickyAssignor / CooperativeStickyAssignor on groups read from
// stdin, for benchmarks/balance.py (compiled against kafka-clients at benchmark time).
//
// Input, one group after another:
//   GROUP <sticky|cooperative-sticky>
//   TOPIC <name> <rack of partition 0>,<rack of partition 1>,...   ("-": no rack)
//   MEMBER <id> <rack or -> <topic,topic,...>
//   END
// Output per group: "ASSIGN <member> <topic>:<partition>,..." lines, then "END".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public final class StickyHarness {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        String line;
        String assignor = null;
        Map<String, List<PartitionInfo>> topics = new HashMap<>();
        Map<String, Subscription> members = new HashMap<>();
        Map<String, Node> nodes = new HashMap<>();
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "GROUP":
                    assignor = f[1];
                    topics = new HashMap<>();
                    members = new HashMap<>();
                    break;
                case "TOPIC": {
                    List<PartitionInfo> parts = new ArrayList<>();
                    String[] racks = f[2].split(",");
                    for (int p = 0; p < racks.length; p++) {
                        String rack = racks[p].equals("-") ? null : racks[p];
                        Node node = nodes.computeIfAbsent(
                            String.valueOf(rack),
                            r -> new Node(nodes.size(), "broker" + nodes.size(), 9092, rack));
                        Node[] replicas = new Node[] {node};
                        parts.add(new PartitionInfo(f[1], p, node, replicas, replicas));
                    }
                    topics.put(f[1], parts);
                    break;
                }
                case "MEMBER": {
                    Optional<String> rack = f[2].equals("-") ? Optional.empty() : Optional.of(f[2]);
                    List<String> subscribed = Arrays.asList(f[3].split(","));
                    members.put(f[1], new Subscription(subscribed, null, Collections.emptyList(), -1, rack));
                    break;
                }
                case "END": {
                    AbstractStickyAssignor sticky = assignor.equals("sticky")
                        ? new StickyAssignor() : new CooperativeStickyAssignor();
                    Map<String, List<TopicPartition>> result = sticky.assignPartitions(topics, members);
                    for (Map.Entry<String, List<TopicPartition>> e : new TreeMap<>(result).entrySet()) {
                        StringBuilder parts = new StringBuilder();
                        for (TopicPartition tp : e.getValue()) {
                            if (parts.length() > 0) parts.append(',');
                            parts.append(tp.topic()).append(':').append(tp.partition());
                        }
                        out.append("ASSIGN ").append(e.getKey()).append(' ').append(parts.length() > 0 ? parts : "-").append('\n');
                    }
                    out.append("END\n");
                    break;
                }
                default:
                    break;
            }
        }
        System.out.print(out);
    }
}
