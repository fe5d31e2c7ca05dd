// AdminClient against Odradek. java ... JavaAdmin.java BOOTSTRAP TOPIC GROUP
// Prints one line per check; the pytest module reads them.

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;

public class JavaAdmin {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        String existing = args[3];  // a topic with records on partition 0, for listOffsets
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            DescribeClusterResult cluster = admin.describeCluster();
            System.out.println("CLUSTER " + cluster.clusterId().get() + " " + cluster.nodes().get().size()
                + " " + cluster.controller().get().id());

            CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                .configs(Map.of("retention.ms", "3600000"))));
            created.all().get();
            System.out.println("CREATED " + topic + " " + created.topicId(topic).get() + " "
                + created.numPartitions(topic).get());
            try {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
                System.out.println("CREATED_AGAIN");
            } catch (ExecutionException e) {
                System.out.println("EXISTS " + (e.getCause() instanceof TopicExistsException));
            }
            TopicDescription desc = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("DESCRIBED " + desc.name() + " " + desc.partitions().size() + " "
                + desc.partitions().get(0).leader().id() + " " + desc.topicId());

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
            System.out.println("CONFIG retention.ms " + config.get("retention.ms").value() + " "
                + config.get("retention.ms").source());
            admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all().get();
            config = admin.describeConfigs(List.of(res)).all().get().get(res);
            System.out.println("ALTERED cleanup.policy " + config.get("cleanup.policy").value()
                + " retention.ms " + config.get("retention.ms").value() + " " + config.get("retention.ms").source());

            TopicPartition tp = new TopicPartition(existing, 0);
            ListOffsetsResult.ListOffsetsResultInfo earliest =
                admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get();
            ListOffsetsResult.ListOffsetsResultInfo latest =
                admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get();
            ListOffsetsResult.ListOffsetsResultInfo maxTs =
                admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp).get();
            System.out.println("OFFSETS " + earliest.offset() + " " + latest.offset() + " " + maxTs.offset()
                + " " + maxTs.timestamp());

            Collection<ConsumerGroupListing> groups = admin.listConsumerGroups().all().get();
            for (ConsumerGroupListing g : groups) {
                if (g.groupId().equals(group)) {
                    System.out.println("LISTED " + g.groupId() + " " + g.groupState().map(Object::toString).orElse("?")
                        + " " + g.type().map(Object::toString).orElse("?"));
                }
            }
            ConsumerGroupDescription gd = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            System.out.println("GROUP " + gd.groupId() + " " + gd.groupState() + " " + gd.members().size()
                + " " + gd.type());
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long total = 0;
            for (org.apache.kafka.clients.consumer.OffsetAndMetadata om : offsets.values()) {
                total += om.offset();
            }
            System.out.println("GROUP_OFFSETS " + offsets.size() + " " + total);

            admin.deleteTopics(List.of(topic)).all().get();
            long deadline = System.currentTimeMillis() + 30000;
            while (admin.listTopics().names().get().contains(topic) && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            System.out.println("DELETED " + !admin.listTopics().names().get().contains(topic));
        }
    }
}
