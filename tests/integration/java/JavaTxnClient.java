// The transactional Java producer (kafka-clients, unchanged) against the broker.
// java -cp '<kafka>/4/lib/*' JavaTxnClient.java MODE BOOTSTRAP TOPIC TRANSACTIONAL_ID PARTITIONS [GROUP]
//   commit-abort: three transactions of 10 records ("java-c1-i" committed, "java-a-i" aborted,
//                 "java-c2-i" committed; the first sends offset 5 of partition 0 for GROUP, the
//                 aborted one offset 7), then reads the topic back read_committed with the Java
//                 consumer: prints "READ value" per record, then "DONE".
//   fence:        producer A begins a transaction and sends "zombie-i"; producer B with the same
//                 transactional id initialises (fencing A) and commits "live-i"; A's commit
//                 fails: prints "FENCED <exception class> <cause class>", then "DONE".

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaTxnClient {
    static KafkaProducer<String, String> producer(String bootstrap, String txid) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(props);
    }

    static void send(KafkaProducer<String, String> p, String topic, String prefix, int n) {
        for (int i = 0; i < n; i++) {
            p.send(new ProducerRecord<>(topic, "k" + i, prefix + "-" + i));
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String bootstrap = args[1];
        String topic = args[2];
        String txid = args[3];
        int partitions = Integer.parseInt(args[4]);
        if (mode.equals("commit-abort")) {
            commitAbort(bootstrap, topic, txid, partitions, args[5]);
        } else if (mode.equals("fence")) {
            fence(bootstrap, topic, txid);
        } else {
            throw new IllegalArgumentException(mode);
        }
        System.out.println("DONE");
    }

    static void commitAbort(String bootstrap, String topic, String txid, int partitions, String group) {
        TopicPartition first = new TopicPartition(topic, 0);
        ConsumerGroupMetadata groupMetadata = new ConsumerGroupMetadata(group);
        try (KafkaProducer<String, String> p = producer(bootstrap, txid)) {
            p.initTransactions();
            p.beginTransaction();
            send(p, topic, "java-c1", 10);
            p.sendOffsetsToTransaction(Map.of(first, new OffsetAndMetadata(5)), groupMetadata);
            p.commitTransaction();
            p.beginTransaction();
            send(p, topic, "java-a", 10);
            p.sendOffsetsToTransaction(Map.of(first, new OffsetAndMetadata(7)), groupMetadata);
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            send(p, topic, "java-c2", 10);
            p.commitTransaction();
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            c.assign(tps);
            c.seekToBeginning(tps);
            var ends = c.endOffsets(tps);  // the last stable offsets: read_committed
            long deadline = System.currentTimeMillis() + 60000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= c.position(tp) >= ends.get(tp);
                if (done) break;
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    System.out.println("READ " + r.value());
                }
            }
        }
    }

    static void fence(String bootstrap, String topic, String txid) {
        KafkaProducer<String, String> a = producer(bootstrap, txid);
        a.initTransactions();
        a.beginTransaction();
        send(a, topic, "zombie", 10);
        a.flush();
        try (KafkaProducer<String, String> b = producer(bootstrap, txid)) {
            b.initTransactions();
            b.beginTransaction();
            send(b, topic, "live", 10);
            b.commitTransaction();
        }
        try {
            // EndTxn with A's old epoch: the coordinator answers PRODUCER_FENCED.
            a.commitTransaction();
            System.out.println("COMMITTED");
        } catch (org.apache.kafka.common.KafkaException e) {
            // The exception, and what caused it (a send's failure surfaces wrapped in commit).
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("FENCED " + e.getClass().getSimpleName() + " " + cause.getClass().getSimpleName());
        } finally {
            a.close(Duration.ofSeconds(5));
        }
    }
}
