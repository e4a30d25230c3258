#!/usr/bin/env node
// One kafkajs client run as a real process for the integration tests.
//
//   node kafkajs_client.js <command> '<json arguments>'
//
// Every outcome is one JSON object per line on stdout; kafkajs's own log goes to stderr.
//
//   produce        {"bootstrap", "topic", "acks", "compression": "none"|"gzip",
//                   "idempotent", "messages": [{"key", "value", "partition", "headers"}]}
//                  → {"event": "sent", "results": [{"partition", "baseOffset", "errorCode"}]}
//   consume        {"bootstrap", "topic", "group", "count", "readUncommitted", "timeoutMs"}
//                  joins the group, reads from the beginning until `count` messages,
//                  commits the next offset of every partition it read, leaves the group
//                  → {"event": "joined", "memberId", "isLeader", "assignment": {topic: [p]}}
//                  → {"event": "message", "partition", "offset", "key", "value", "headers"}
//                  → {"event": "committed", "offsets": {"partition": next offset}}
//   admin          {"bootstrap", "operations": [{"op": <admin method>, "args": {...}}]}
//                  → {"event": "result", "op", "result"} per operation, in order
//   transaction    {"bootstrap", "topic", "transactionalId"} begins a transaction
//                  → {"event": "transaction_started"} (not expected against Sluice yet)
//
// A failure ends the run with {"event": "error", "name", "type", "message", "retriable",
// "elapsedMs"} and exit status 1. Keys, values and header values are UTF-8 strings
// (null stays null).

'use strict'

const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const startedMs = Date.now()

function emit(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

function stderrLogCreator() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

function client(args) {
  return new Kafka({
    clientId: args.clientId || 'sluice-kafkajs-test',
    brokers: [args.bootstrap],
    connectionTimeout: 5000,
    requestTimeout: args.requestTimeoutMs || 15000,
    retry: { retries: args.retries === undefined ? 5 : args.retries, initialRetryTime: 100 },
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
  })
}

function text(buffer) {
  return buffer === null || buffer === undefined ? null : buffer.toString('utf8')
}

function headersAsText(headers) {
  const out = {}
  for (const [name, value] of Object.entries(headers || {})) {
    out[name] = Array.isArray(value) ? value.map(text) : text(value)
  }
  return out
}

async function produce(args) {
  const producer = client(args).producer({
    idempotent: Boolean(args.idempotent),
    maxInFlightRequests: args.idempotent ? 1 : undefined,
    allowAutoTopicCreation: args.allowAutoTopicCreation !== false,
  })
  await producer.connect()
  try {
    const compression =
      args.compression === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None
    const results = await producer.send({
      topic: args.topic,
      acks: args.acks === undefined ? -1 : args.acks,
      compression,
      messages: args.messages.map((m) => ({
        key: m.key === undefined ? null : m.key,
        value: m.value === undefined ? null : m.value,
        partition: m.partition,
        headers: m.headers,
        timestamp: m.timestamp,
      })),
    })
    emit('sent', {
      results: results.map((r) => ({
        partition: r.partition,
        baseOffset: r.baseOffset === undefined ? null : Number(r.baseOffset),
        errorCode: r.errorCode,
      })),
    })
  } finally {
    await producer.disconnect()
  }
}

async function consume(args) {
  const consumer = client(args).consumer({
    groupId: args.group,
    readUncommitted: Boolean(args.readUncommitted),
    sessionTimeout: args.sessionTimeoutMs || 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
  })
  const { GROUP_JOIN, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, ({ payload }) => {
    emit('joined', {
      memberId: payload.memberId,
      isLeader: payload.isLeader,
      assignment: payload.memberAssignment,
    })
  })
  let crashed = null
  consumer.on(CRASH, ({ payload }) => {
    crashed = payload.error
  })
  await consumer.connect()
  const nextOffsets = {}
  let seen = 0
  let finish
  const finished = new Promise((resolve) => {
    finish = resolve
  })
  try {
    await consumer.subscribe({ topics: [args.topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (seen >= args.count) return
        emit('message', {
          partition,
          offset: Number(message.offset),
          key: text(message.key),
          value: text(message.value),
          headers: headersAsText(message.headers),
        })
        nextOffsets[partition] = Number(message.offset) + 1
        seen += 1
        if (seen >= args.count) finish()
      },
    })
    const timeoutMs = args.timeoutMs || 30000
    let timer
    const timedOut = new Promise((resolve) => {
      timer = setTimeout(resolve, timeoutMs, 'timeout')
    })
    const outcome = await Promise.race([finished, timedOut])
    clearTimeout(timer)
    if (crashed) throw crashed
    if (outcome === 'timeout') {
      const error = new Error(`read ${seen} of ${args.count} messages in ${timeoutMs} ms`)
      error.name = 'ConsumeTimeout'
      throw error
    }
    await consumer.commitOffsets(
      Object.entries(nextOffsets).map(([partition, offset]) => ({
        topic: args.topic,
        partition: Number(partition),
        offset: String(offset),
      })),
    )
    emit('committed', { offsets: nextOffsets })
  } finally {
    await consumer.disconnect()
  }
}

function jsonable(value) {
  return JSON.parse(
    JSON.stringify(value, (_key, v) => (typeof v === 'bigint' ? v.toString() : v)),
  )
}

async function admin(args) {
  const adminClient = client(args).admin()
  await adminClient.connect()
  try {
    for (const { op, args: opArgs } of args.operations) {
      if (typeof adminClient[op] !== 'function') throw new Error(`no admin operation ${op}`)
      const result = await adminClient[op](opArgs)
      emit('result', { op, result: result === undefined ? null : jsonable(result) })
    }
  } finally {
    await adminClient.disconnect()
  }
}

async function transaction(args) {
  // args.transactions: [{ commit: bool, messages: [{ value, partition }] }], in order.
  const producer = client(args).producer({
    transactionalId: args.transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
  })
  await producer.connect()
  try {
    for (const planned of args.transactions || []) {
      const txn = await producer.transaction()
      await txn.send({
        topic: args.topic,
        acks: -1,
        messages: planned.messages.map((m) => ({ value: m.value, partition: m.partition })),
      })
      if (planned.commit) {
        await txn.commit()
      } else {
        await txn.abort()
      }
      emit(planned.commit ? 'committed' : 'aborted', { count: planned.messages.length })
    }
  } finally {
    await producer.disconnect()
  }
}

const COMMANDS = { produce, consume, admin, transaction }

async function main() {
  const [command, rawArgs] = process.argv.slice(2)
  const run = COMMANDS[command]
  if (!run) {
    process.stderr.write(`usage: kafkajs_client.js {${Object.keys(COMMANDS).join('|')}} JSON\n`)
    process.exit(2)
  }
  await run(JSON.parse(rawArgs || '{}'))
}

main().then(
  () => process.exit(0),
  (error) => {
    emit('error', {
      name: error.name,
      type: error.type || null,
      message: error.message,
      retriable: error.retriable === undefined ? null : error.retriable,
      elapsedMs: Date.now() - startedMs,
    })
    process.exit(1)
  },
)
