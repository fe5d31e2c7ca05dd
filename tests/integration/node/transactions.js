// kafkajs's transactional producer against the broker.
// node transactions.js BOOTSTRAP TOPIC TRANSACTIONAL_ID PARTITIONS GROUP
// Three transactions of 10 records ("kafkajs-c1-i" committed, "kafkajs-a-i" aborted,
// "kafkajs-c2-i" committed; the first sends offset 5 of partition 0 for GROUP, the aborted one
// offset 7), then reads the topic back with a kafkajs consumer (read_committed,
// its default): prints "READ value" per record, then "DONE".
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, txid, partitionsArg, group] = process.argv.slice(2);
  const offsets = { 'kafkajs-c1': '5', 'kafkajs-a': '7' };
  const partitions = Number(partitionsArg);
  const kafka = new Kafka({ clientId: 'odradek-txn-test', brokers: bootstrap.split(','), logLevel: logLevel.WARN });
  const producer = kafka.producer({ transactionalId: txid, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const batch = (prefix) => ({
    topic,
    messages: Array.from({ length: 10 }, (_, i) => ({ key: `k${i}`, value: `${prefix}-${i}` })),
  });
  for (const [prefix, commit] of [['kafkajs-c1', true], ['kafkajs-a', false], ['kafkajs-c2', true]]) {
    const txn = await producer.transaction();
    await txn.send(batch(prefix));
    if (offsets[prefix]) {
      await txn.sendOffsets({
        consumerGroupId: group,
        topics: [{ topic, partitions: [{ partition: 0, offset: offsets[prefix] }] }],
      });
    }
    if (commit) await txn.commit(); else await txn.abort();
  }
  await producer.disconnect();

  const admin = kafka.admin();
  await admin.connect();
  // fetchTopicOffsets: the high watermarks (every transaction above is complete, so the last
  // stable offsets too).
  const ends = new Map((await admin.fetchTopicOffsets(topic)).map((o) => [o.partition, Number(o.high)]));
  await admin.disconnect();

  const consumer = kafka.consumer({ groupId: `${txid}-reader`, readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const positions = new Map();
  const done = () => [...Array(partitions).keys()].every((p) => (positions.get(p) ?? 0) >= ends.get(p));
  await consumer.run({
    eachBatch: async ({ batch: b }) => {
      for (const m of b.messages) console.log(`READ ${m.value.toString()}`);
      // The batch's last offset, control records included, tells how far the partition is read.
      positions.set(b.partition, Number(b.lastOffset()) + 1);
    },
  });
  const deadline = Date.now() + 60000;
  while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  await consumer.disconnect();
  if (!done()) throw new Error(`did not reach the end offsets ${JSON.stringify([...ends])}`);
  console.log('DONE');
}

main().catch((e) => { console.error(e); process.exit(1); });
