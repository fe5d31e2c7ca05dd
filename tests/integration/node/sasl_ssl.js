// kafkajs over SASL_SSL (SCRAM-SHA-512 on TLS).
// node sasl_ssl.js BOOTSTRAP TOPIC CA_PEM USER PASSWORD
// Produces 5 records ("kafkajs-sasl-ssl-i"), reads them back: prints "READ value" per record, then "DONE".
// A refused login or TLS handshake exits 1 with the error on stderr.
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, ca, username, password] = process.argv.slice(2);
  const kafka = new Kafka({
    clientId: 'odradek-sasl-ssl-test',
    brokers: bootstrap.split(','),
    ssl: { ca: [fs.readFileSync(ca, 'utf-8')] },
    sasl: { mechanism: 'scram-sha-512', username, password },
    logLevel: logLevel.NOTHING,
    retry: { retries: 2 },
  });
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: Array.from({ length: 5 }, (_, i) => ({ value: `kafkajs-sasl-ssl-${i}` })) });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `sasl-ssl-${Date.now()}` });
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

main().catch((e) => { console.error(`${e.name}: ${e.message}`); process.exit(1); });
