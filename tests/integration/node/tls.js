// kafkajs over TLS (mutual TLS when a client certificate is given).
// node tls.js BOOTSTRAP TOPIC CA_PEM [CERT_PEM KEY_PEM]
// Produces 5 records ("kafkajs-tls-i"), reads them back: prints "READ value" per record, then "DONE".
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, ca, cert, key] = process.argv.slice(2);
  const ssl = { ca: [fs.readFileSync(ca, 'utf-8')] };
  if (cert) {
    ssl.cert = fs.readFileSync(cert, 'utf-8');
    ssl.key = fs.readFileSync(key, 'utf-8');
  }
  const kafka = new Kafka({ clientId: 'odradek-tls-test', brokers: bootstrap.split(','), ssl, logLevel: logLevel.WARN });
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: Array.from({ length: 5 }, (_, i) => ({ value: `kafkajs-tls-${i}` })) });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `tls-${Date.now()}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out reading')), 60000);
    consumer.run({
      eachMessage: async ({ message }) => {
        console.log(`READ ${message.value.toString()}`);
        seen += 1;
        if (seen === 5) { clearTimeout(timer); resolve(); }
      },
    });
  });
  await consumer.disconnect();
  console.log('DONE');
}

main().catch((e) => { console.error(e); process.exit(1); });
