// response_format json_schema through the openai npm client against `hachi serve` on gemma4-micro
// (run by tests/test_serve.c), each reply checked by Ajv, a JSON Schema validator independent of
// hachi's grammar:
//   node schemas.mjs BASE_URL API_KEY MODEL_ID
// Sampled replies (temperature 1, a seed each) to schemas with bounds (string lengths, item counts,
// number ranges, also through anyOf and $ref), whole multipleOf, unique enum items, string patterns
// and formats (checked by ajv-formats), maps' keys, allOf's schemas together, tuples (prefixItems by Ajv's draft
// 2020-12 validator; drafts 4 to 7's items array and additionalItems):
// every reply must end by itself ("stop"), parse, and be valid. Prints one "ok ..." or "FAIL ..." line per check; exits 1 on a failure.
import OpenAI from 'openai';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [base, apiKey, modelId] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey, maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ strict: false });
addFormats(ajv);   // (their full mode: days of the month, leap years)
const ajv2020 = new Ajv2020({ strict: false });   // (prefixItems is draft 2020-12's)
const validator = (name) => (name === 'tuples' ? ajv2020 : ajv);
let failed = 0;
function check(cond, what, detail = '') {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}${cond ? '' : ': ' + detail}`);
  if (!cond) failed++;
}

const schemas = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 12 },
      age: { type: 'integer', minimum: 0, maximum: 120 },
      score: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      tags: { type: 'array', items: { type: 'string', maxLength: 5 }, minItems: 1, maxItems: 3 },
    },
    required: ['name', 'age', 'score', 'tags'],
    additionalProperties: false,
  },
  small_ints: { type: 'array', items: { type: 'integer', minimum: -3, maximum: 3 }, minItems: 2, maxItems: 4 },
  // pydantic's shape: $defs, Optional[...] as anyOf with null, a float range with exclusive bounds
  pydantic: {
    $defs: {
      Point: {
        type: 'object',
        properties: { x: { type: 'number', exclusiveMinimum: -1.5, exclusiveMaximum: 2.25 }, label: { anyOf: [{ type: 'string', minLength: 3, maxLength: 8 }, { type: 'null' }] } },
        required: ['x', 'label'],
      },
    },
    type: 'object',
    properties: { points: { type: 'array', items: { $ref: '#/$defs/Point' }, minItems: 1, maxItems: 2 }, tenths: { type: 'number', minimum: 0.1, maximum: 0.3 } },
    required: ['points', 'tenths'],
  },
  multiples: {
    type: 'object',
    properties: {
      step: { type: 'integer', multipleOf: 25, minimum: -100, maximum: 1000 },
      even: { type: 'number', multipleOf: 2 },
      threes: { type: 'array', items: { type: 'integer', multipleOf: 3, minimum: -10, maximum: 40 }, minItems: 1, maxItems: 4 },
      colors: { type: 'array', items: { enum: ['red', 'green', 'blue'] }, uniqueItems: true, minItems: 2 },
      flags: { type: 'array', items: { type: 'boolean' }, uniqueItems: true },
    },
    required: ['step', 'even', 'threes', 'colors', 'flags'],
  },
  patterns: {
    type: 'object',
    properties: {
      when: { type: 'string', format: 'date-time' },
      day: { type: 'string', format: 'date' },
      id: { type: 'string', format: 'uuid' },
      ip: { type: 'string', format: 'ipv4' },
      ip6: { type: 'string', format: 'ipv6' },
      host: { type: 'string', format: 'hostname', maxLength: 30 },
      site: { type: 'string', format: 'uri', maxLength: 40 },
      mail: { type: 'string', format: 'email', maxLength: 24 },
      code: { type: 'string', pattern: '^[A-Z]{2}-\\d{3,5}$' },
      loose: { anyOf: [{ type: 'string', pattern: 'a(b|c)', minLength: 3, maxLength: 6 }, { type: 'null' }] },
      words: { type: 'array', items: { type: 'string', pattern: '^\\w+( \\w+)?$', maxLength: 10 }, maxItems: 3 },
    },
    required: ['when', 'day', 'id', 'ip', 'ip6', 'host', 'site', 'mail', 'code', 'loose', 'words'],
  },
  // tuples: pydantic's (prefixItems with minItems = maxItems), an open one, and drafts 4 to 7's form
  tuples: {
    type: 'object',
    properties: {
      point: { type: 'array', prefixItems: [{ type: 'number', minimum: -1, maximum: 1 }, { type: 'integer', minimum: 0, maximum: 9 }], minItems: 2, maxItems: 2 },
      tagged: { type: 'array', prefixItems: [{ enum: ['id', 'name'] }, { type: 'boolean' }], items: { type: 'string', maxLength: 4 }, maxItems: 4 },
    },
    required: ['point', 'tagged'],
  },
  tuples07: {
    type: 'array',
    items: [{ type: 'boolean' }, { type: 'string', maxLength: 3 }, { type: 'array', items: [{ type: 'null' }], additionalItems: false, minItems: 1 }],
    additionalItems: false,
    minItems: 2,
  },
  // maps: keys held to propertyNames (a string schema, an enum) or one patternProperties; members counted
  maps: {
    type: 'object',
    properties: {
      scores: { type: 'object', propertyNames: { pattern: '^[a-z]{1,6}$' }, additionalProperties: { type: 'integer', minimum: 0, maximum: 9 }, minProperties: 1, maxProperties: 3 },
      pick: { type: 'object', propertyNames: { enum: ['red', 'blue'] }, additionalProperties: { type: 'boolean' } },
      env: { type: 'object', patternProperties: { '^[A-Z_]{1,8}$': { type: 'string', maxLength: 5 } }, additionalProperties: false, maxProperties: 2 },
      none: { type: 'object', additionalProperties: false },
    },
    required: ['scores', 'pick', 'env', 'none'],
  },
  // allOf: zod's intersections, a $ref beside constraints, pydantic 1's allOf of one $ref with a description
  intersections: {
    definitions: {
      Tag: { type: 'string', minLength: 1 },
      Box: { type: 'object', properties: { w: { type: 'integer', minimum: 1 } }, required: ['w'] },
    },
    allOf: [
      {
        type: 'object',
        properties: { id: { type: 'string', maxLength: 6 }, level: { allOf: [{ type: 'integer', minimum: 0 }, { maximum: 9 }] } },
        required: ['id', 'level'],
        additionalProperties: { type: ['string', 'object'] },   // (the other's properties held to it too)
      },
      {
        properties: {
          id: { minLength: 2 },
          tag: { $ref: '#/definitions/Tag', maxLength: 4 },
          box: { title: 'Box', description: 'a box', allOf: [{ $ref: '#/definitions/Box' }] },
          pick: { allOf: [{ enum: ['a', 'b', 'c'] }, { enum: ['c', 'b', 'z'] }] },
        },
        required: ['tag', 'box', 'pick'],
      },
    ],
  },
};

// the validator is live: it refuses what breaks a bound
check(!ajv.validate(schemas.person, { name: '', age: 3, score: 0.5, tags: ['a'] }) &&
  !ajv.validate(schemas.small_ints, [1, 4]) && ajv.validate(schemas.small_ints, [1, -3]), 'Ajv refuses a broken bound');
const good = { when: '2024-02-29T23:59:59Z', day: '2024-02-29', id: '123e4567-e89b-12d3-a456-426614174000', ip: '10.0.0.1',
  ip6: '1:2:3:4:5:6:7:8', host: 'a-b.example', site: 'https://x.io/a?b#c', mail: 'a@b.io', code: 'AB-123', loose: 'xab',
  words: ['a b'] };
check(ajv.validate(schemas.patterns, good) && !ajv.validate(schemas.patterns, { ...good, day: '2023-02-29' }) &&
  !ajv.validate(schemas.patterns, { ...good, code: 'AB-12' }) && !ajv.validate(schemas.patterns, { ...good, site: 'x y' }) &&
  !ajv.validate(schemas.patterns, { ...good, host: '-a' }), 'Ajv refuses a broken pattern or format');
const nums = { step: 25, even: 4, threes: [3], colors: ['red', 'blue'], flags: [true, false] };
check(ajv.validate(schemas.multiples, nums) && !ajv.validate(schemas.multiples, { ...nums, colors: ['red', 'red'] }) &&
  !ajv.validate(schemas.multiples, { ...nums, step: 30 }), 'Ajv refuses a repeated item or a broken multiple');
check(ajv2020.validate(schemas.tuples, { point: [0.5, 3], tagged: ['id', true, 'ab'] }) &&
  !ajv2020.validate(schemas.tuples, { point: [0.5, 'x'], tagged: ['id'] }) && !ajv2020.validate(schemas.tuples, { point: [0.5, 3], tagged: ['no'] }) &&
  ajv.validate(schemas.tuples07, [true, 'ab']) && !ajv.validate(schemas.tuples07, [true, 'ab', [null], 1]) &&
  !ajv.validate(schemas.tuples07, ['ab', true]), 'Ajv refuses a broken tuple');
const map = { scores: { ab: 3 }, pick: { red: true }, env: { HOME: 'x' }, none: {} };
check(ajv.validate(schemas.maps, map) && !ajv.validate(schemas.maps, { ...map, scores: { A: 1 } }) &&
  !ajv.validate(schemas.maps, { ...map, pick: { green: true } }) && !ajv.validate(schemas.maps, { ...map, env: { home: 'x' } }) &&
  !ajv.validate(schemas.maps, { ...map, none: { a: 1 } }) && !ajv.validate(schemas.maps, { ...map, scores: {} }),
  'Ajv refuses a key its map does not take, or a count');
const both = { id: 'ab', level: 9, tag: 'x', box: { w: 1 }, pick: 'b' };
check(ajv.validate(schemas.intersections, both) && !ajv.validate(schemas.intersections, { ...both, id: 'a' }) &&
  !ajv.validate(schemas.intersections, { ...both, pick: 'a' }) && !ajv.validate(schemas.intersections, { ...both, tag: 'xxxxx' }),
  'Ajv refuses what breaks one of allOf\'s schemas');

const seeds = [1, 2, 3, 4, 5, 6];
for (const [name, schema] of Object.entries(schemas)) {
  const bad = [];
  for (const seed of seeds) {
    const r = await client.chat.completions.create({
      model: modelId, temperature: 1, seed, max_tokens: 1500,
      messages: [{ role: 'user', content: 'Once upon a time' }],
      response_format: { type: 'json_schema', json_schema: { name, schema } },
    });
    const text = r.choices[0].message.content;
    let doc, parsed = false;
    try { doc = JSON.parse(text); parsed = true; } catch { /* reported below */ }
    const v = validator(name);
    if (r.choices[0].finish_reason !== 'stop' || !parsed || !v.validate(schema, doc))
      bad.push({ seed, finish: r.choices[0].finish_reason, text, errors: parsed ? v.errors : 'no JSON' });
  }
  check(bad.length === 0, `${name}: ${seeds.length} sampled replies end, parse and are valid`, JSON.stringify(bad));
}
process.exit(failed ? 1 : 0);
