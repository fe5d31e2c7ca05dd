// The Java consumer against Odradek.
//
// group:   java ... JavaConsumer.java group BOOTSTRAP TOPIC GROUP PROTOCOL EXPECTED TIMEOUT_MS
//          subscribes in GROUP with group.protocol=PROTOCOL (classic|consumer), reads until EXPECTED
//          records arrived, commits after each poll; small fetches so that the read takes many
//          (incremental) fetch requests. Prints "REC partition offset key value seq codec", then
//          "COMMITTED partition offset" for each assigned partition.
// offsets: java ... JavaConsumer.java offsets BOOTSTRAP TOPIC GROUP TIMESTAMP
//          partition 0 assigned by hand: offsetsForTimes, seek, poll, commitSync with metadata,
//          committed, seekToBeginning/seekToEnd, beginningOffsets/endOffsets.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;

public class JavaConsumer {
    static Properties base(String bootstrap, String group) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return props;
    }

    static String header(ConsumerRecord<String, String> r, String key) {
        Header h = r.headers().lastHeader(key);
        return h == null ? "-" : new String(h.value(), StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("group")) {
            group(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]), Long.parseLong(args[6]));
        } else {
            offsets(args[1], args[2], args[3], Long.parseLong(args[4]));
        }
    }

    static void group(String bootstrap, String topic, String group, String protocol, int expected, long timeoutMs) {
        Properties props = base(bootstrap, group);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        // Small fetches: reading everything takes many fetch requests, i.e. many session epochs.
        props.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "1024");
        props.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "2048");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        int count = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (count < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    System.out.println("REC " + r.partition() + " " + r.offset() + " " + r.key() + " " + r.value()
                        + " " + header(r, "seq") + " " + header(r, "codec"));
                    count++;
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
            Set<TopicPartition> assigned = consumer.assignment();
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned, Duration.ofSeconds(30));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet()) {
                if (e.getValue() != null) {
                    System.out.println("COMMITTED " + e.getKey().partition() + " " + e.getValue().offset());
                }
            }
        }
        System.out.println("COUNT " + count);
    }

    static void offsets(String bootstrap, String topic, String group, long timestamp) {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(base(bootstrap, group))) {
            consumer.assign(List.of(tp));
            Map<TopicPartition, Long> query = new HashMap<>();
            query.put(tp, timestamp);
            OffsetAndTimestamp found = consumer.offsetsForTimes(query, Duration.ofSeconds(30)).get(tp);
            System.out.println("FOR_TIME " + (found == null ? "null" : found.offset() + " " + found.timestamp()));
            query.put(tp, Long.MAX_VALUE / 2);
            OffsetAndTimestamp none = consumer.offsetsForTimes(query, Duration.ofSeconds(30)).get(tp);
            System.out.println("FOR_FUTURE " + (none == null ? "null" : Long.toString(none.offset())));
            long start = found == null ? 0 : found.offset();
            consumer.seek(tp, start);
            ConsumerRecords<String, String> records = ConsumerRecords.empty();
            long deadline = System.currentTimeMillis() + 30000;
            while (records.isEmpty() && System.currentTimeMillis() < deadline) {
                records = consumer.poll(Duration.ofMillis(200));
            }
            ConsumerRecord<String, String> first = records.iterator().next();
            System.out.println("FIRST " + first.offset() + " " + first.timestamp() + " " + first.value());
            consumer.commitSync(Map.of(tp, new OffsetAndMetadata(start + 1, "java-meta")));
            OffsetAndMetadata committed = consumer.committed(Set.of(tp), Duration.ofSeconds(30)).get(tp);
            System.out.println("COMMITTED " + committed.offset() + " " + committed.metadata());
            consumer.seekToBeginning(List.of(tp));
            System.out.println("BEGIN " + consumer.position(tp, Duration.ofSeconds(30)));
            consumer.seekToEnd(List.of(tp));
            System.out.println("END " + consumer.position(tp, Duration.ofSeconds(30)));
            System.out.println("OFFSETS " + consumer.beginningOffsets(List.of(tp)).get(tp) + " "
                + consumer.endOffsets(List.of(tp)).get(tp));
        }
    }
}
