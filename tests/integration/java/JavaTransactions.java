import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional producer (kafka-clients 4.x): transactions committed and aborted in turn
 * (pattern of 'c'/'a' letters), each writing RECORDS records to partition 0 of TOPIC and, in the
 * same transaction, the offset of the group GROUP for partition 0 of TOPIC (the number of the
 * transaction). After each (once complete): "TXN <i> <c|a> <producer id> <epoch>" from DescribeTransactions and
 * "PRODUCER <producer id> <epoch>" from DescribeProducers of the partition. Then a read_committed
 * consumer prints "READ <value>" per record it sees, and "OFFSET <offset>" the group's committed
 * offset; "DONE" last.
 *
 * Usage: JavaTransactions BOOTSTRAP TOPIC GROUP TXN_ID PATTERN RECORDS
 */
public class JavaTransactions {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], txnId = args[3], pattern = args[4];
        int records = Integer.parseInt(args[5]);
        TopicPartition tp = new TopicPartition(topic, 0);

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");

        try (Admin admin = Admin.create(ap); KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            producer.initTransactions();
            for (int i = 0; i < pattern.length(); i++) {
                boolean commit = pattern.charAt(i) == 'c';
                producer.beginTransaction();
                for (int r = 0; r < records; r++) {
                    producer.send(new ProducerRecord<>(topic, 0, null, i + "-" + r));
                }
                producer.sendOffsetsToTransaction(
                        Collections.singletonMap(tp, new OffsetAndMetadata(i + 1)),
                        new ConsumerGroupMetadata(group));
                producer.flush(); // the aborted records reach the partition too (then its marker)
                if (commit) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                // EndTxn is answered once PrepareCommit/PrepareAbort is written: wait (bounded)
                // for the markers, i.e. CompleteCommit/CompleteAbort.
                TransactionDescription d = null;
                long until = System.currentTimeMillis() + 30000;
                do {
                    if (d != null) Thread.sleep(50);
                    d = admin.describeTransactions(Collections.singleton(txnId)).description(txnId).get();
                } while (d.state().toString().startsWith("Prepare") && System.currentTimeMillis() < until);
                System.out.println("TXN " + i + " " + pattern.charAt(i) + " " + d.producerId() + " "
                        + d.producerEpoch() + " " + d.state());
                DescribeProducersResult dp = admin.describeProducers(Collections.singleton(tp));
                for (ProducerState s : dp.partitionResult(tp).get().activeProducers()) {
                    System.out.println("PRODUCER " + s.producerId() + " " + s.producerEpoch());
                }
            }
        }

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.assign(Collections.singletonList(tp));
            long end = consumer.endOffsets(Collections.singletonList(tp)).get(tp);
            long deadline = System.currentTimeMillis() + 30000;
            List<String> seen = new ArrayList<>();
            while (consumer.position(tp) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> rec : consumer.poll(Duration.ofMillis(500))) {
                    seen.add(rec.value());
                }
            }
            for (String v : seen) {
                System.out.println("READ " + v);
            }
        }
        try (Admin admin = Admin.create(ap)) {
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            OffsetAndMetadata o = offsets.get(tp);
            System.out.println("OFFSET " + (o == null ? -1 : o.offset()));
        }
        System.out.println("DONE");
    }
}
