// A Kafka Streams application with processing.guarantee=exactly_once_v2: a stateful aggregation
// (per key: how many records and the sum of their values) behind a repartition topic, kept in a
// RocksDB store with a changelog topic, every update written to the output topic (record cache
// off, so one output per input).
//
// java -cp '<kafka>/4/lib/*' TxnStreamsAggregate.java BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR
//
// Input: key = any string, value = a decimal integer. Output: key, "count,sum" after each input
// record of the key. Prints "STATE <new state>" on every state change; SIGTERM closes the
// application cleanly (its last transaction committed), SIGKILL does not.

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class TxnStreamsAggregate {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        String output = args[3];
        String stateDir = args[4];

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 2000);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 50);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            // groupBy (not groupByKey): the records go through a repartition topic, written in
            // the same transactions and read back read_committed, purged with DeleteRecords.
            .groupBy((key, value) -> key, Grouped.with("by-key", Serdes.String(), Serdes.String()))
            .aggregate(
                () -> "0,0",
                (key, value, agg) -> {
                    String[] parts = agg.split(",");
                    long count = Long.parseLong(parts[0]) + 1;
                    long sum = Long.parseLong(parts[1]) + Long.parseLong(value);
                    return count + "," + sum;
                },
                Materialized.<String, String, org.apache.kafka.streams.state.KeyValueStore<org.apache.kafka.common.utils.Bytes, byte[]>>as("aggregates")
                    .withKeySerde(Serdes.String())
                    .withValueSerde(Serdes.String())
                    .withCachingDisabled())
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch failed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {
                failed.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            boolean clean = streams.close(Duration.ofSeconds(60));
            System.out.println("CLOSED " + clean);
            System.out.flush();
        }));
        streams.start();
        failed.await();
        // ERROR: every stream thread died (the cause is logged); exit non-zero for the test.
        streams.close(Duration.ofSeconds(10));
        System.exit(1);
    }
}
