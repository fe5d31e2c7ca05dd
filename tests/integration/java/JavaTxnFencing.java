import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Zombie fencing (kafka-clients 4.x): producer A begins a transaction and writes "a-*" to
 * partition 0 of TOPIC; producer B with the same transactional id initialises (A's transaction
 * is aborted, A fenced), then commits "b-*". A's commit fails: "FENCED <exception class>". A
 * read_committed consumer prints "READ <value>" per record; "DONE" last.
 *
 * Usage: JavaTxnFencing BOOTSTRAP TOPIC TXN_ID
 */
public class JavaTxnFencing {
    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        return new KafkaProducer<>(pp);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], txnId = args[2];
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<String, String> a = producer(bootstrap, txnId);
        a.initTransactions();
        a.beginTransaction();
        for (int i = 0; i < 3; i++) a.send(new ProducerRecord<>(topic, 0, null, "a-" + i));
        a.flush();
        KafkaProducer<String, String> b = producer(bootstrap, txnId);
        b.initTransactions();
        try {
            a.commitTransaction();
            System.out.println("NOT FENCED");
        } catch (Exception e) {
            System.out.println("FENCED " + e.getClass().getSimpleName() + " " + e.getMessage());
        }
        a.close(Duration.ofSeconds(5));
        b.beginTransaction();
        for (int i = 0; i < 3; i++) b.send(new ProducerRecord<>(topic, 0, null, "b-" + i));
        b.commitTransaction();
        b.close();

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
            for (String v : seen) System.out.println("READ " + v);
        }
        System.out.println("DONE");
    }
}
