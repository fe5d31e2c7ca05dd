// Idempotent producer (acks=all) against Odradek: keys, headers, one producer per codec.
// java -cp '<kafka>/4/lib/*' JavaProducer.java BOOTSTRAP TOPIC RECORDS_PER_CODEC CODEC[,CODEC...]
// Prints "SENT codec seq partition offset" per acknowledged record.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int n = Integer.parseInt(args[2]);
        int seq = 0;
        for (String codec : args[3].split(",")) {
            Properties props = new Properties();
            props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ProducerConfig.ACKS_CONFIG, "all");
            props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
            props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            List<Integer> seqs = new ArrayList<>();
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
                for (int i = 0; i < n; i++, seq++) {
                    ProducerRecord<String, String> rec =
                        new ProducerRecord<>(topic, "k" + (seq % 7), "v" + seq + "-" + codec + "-" + "x".repeat(seq % 50));
                    rec.headers().add("seq", Integer.toString(seq).getBytes(StandardCharsets.UTF_8));
                    rec.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                    sent.add(producer.send(rec));
                    seqs.add(seq);
                }
                producer.flush();
                for (int i = 0; i < sent.size(); i++) {
                    RecordMetadata md = sent.get(i).get();
                    System.out.println("SENT " + codec + " " + seqs.get(i) + " " + md.partition() + " " + md.offset());
                }
            }
        }
        System.out.println("DONE");
    }
}
