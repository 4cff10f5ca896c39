// Prints, as one JSON object {name: schema}, the JSON schemas that zod
// users send: zod-to-json-schema (default and openApi3 targets), zod 4's
// own z.toJSONSchema, and the OpenAI SDK's zodResponseFormat (strict
// mode), for the common zod types. serve's schema_test.go compiles every
// one of them.
const zod = require('zod');
const z3 = require('zod/v3');
const { zodToJsonSchema } = require('zod-to-json-schema');
const { zodResponseFormat } = require('openai/helpers/zod');

function shapes(z) {
  const Address = z.object({ street: z.string(), city: z.string(), zip: z.string().regex(/^[0-9]{5}$/) });
  return {
    primitives: z.object({ s: z.string(), n: z.number(), i: z.number().int(), b: z.boolean() }),
    bounds: z.object({ age: z.number().int().min(0).max(150), pos: z.number().positive(), neg: z.number().int().negative(),
      nonneg: z.number().nonnegative(), big: z.number().int().max(1e18), frac: z.number().min(0.5).max(99.5), step: z.number().int().multipleOf(5) }),
    strings: z.object({ email: z.string().email(), url: z.string().url(), uuid: z.string().uuid(), short: z.string().min(1).max(20),
      dt: z.string().datetime(), date: z.string().date ? z.string().date() : z.string(), pat: z.string().regex(/^[A-Z]{2}-[0-9]+$/),
      starts: z.string().startsWith('ab'), ends: z.string().endsWith('yz') }),
    enums: z.object({ color: z.enum(['red', 'green', 'blue']), lit: z.literal('fixed'), num: z.literal(3),
      union: z.union([z.literal('a'), z.literal('b')]) }),
    optional: z.object({ req: z.string(), opt: z.string().optional(), nul: z.string().nullable(), both: z.number().nullish(),
      def: z.string().default('x') }),
    arrays: z.object({ tags: z.array(z.string()), few: z.array(z.number()).min(1).max(3), tuple: z.tuple([z.string(), z.number()]),
      set: z.set ? z.array(z.string()) : z.array(z.string()), nonempty: z.array(z.boolean()).nonempty() }),
    nested: z.object({ name: z.string(), home: Address, work: Address.optional(), history: z.array(Address) }),
    records: z.object({ scores: z.record(z.string(), z.number()), meta: z.record(z.string(), z.string()) }),
    unions: z.object({ v: z.union([z.string(), z.number(), z.boolean()]),
      shape: z.discriminatedUnion('kind', [z.object({ kind: z.literal('circle'), r: z.number() }), z.object({ kind: z.literal('square'), side: z.number() })]) }),
    intersection: z.intersection(z.object({ a: z.string() }), z.object({ b: z.number() })),
    recipe: z.object({ title: z.string().describe('The recipe title'), servings: z.number().int().min(1).max(12),
      ingredients: z.array(z.object({ name: z.string(), amount: z.number(), unit: z.enum(['g', 'ml', 'pcs']) })),
      steps: z.array(z.string()).min(1), vegetarian: z.boolean(), rating: z.number().min(0).max(5).optional() }),
    any: z.object({ anything: z.any(), unknown: z.unknown() }),
    bigint: z.object({ n: z.bigint ? z.bigint() : z.number() }),
    dateobj: z.object({ when: z.date() }),
  };
}

const out = {};
function put(name, f) {
  try { out[name] = f(); } catch (e) { out[name] = { __error: String(e && e.message || e) }; }
}
const s3 = shapes(z3.z || z3);
for (const [k, v] of Object.entries(s3)) {
  put('zod-to-json-schema/' + k, () => zodToJsonSchema(v));
  put('zod-to-json-schema-openapi3/' + k, () => zodToJsonSchema(v, { target: 'openApi3' }));
}
const z4 = zod.z || zod;
const s4 = shapes(z4);
if (typeof z4.toJSONSchema === 'function') {
  for (const [k, v] of Object.entries(s4)) {
    if (k === 'dateobj' || k === 'bigint') continue; // not representable in JSON Schema
    put('zod4/' + k, () => z4.toJSONSchema(v));
  }
}
for (const [k, v] of Object.entries(s4)) {
  if (k === 'dateobj' || k === 'bigint' || k === 'any' || k === 'records' || k === 'intersection') continue; // strict mode refuses these
  put('zodResponseFormat/' + k, () => zodResponseFormat(v, k).json_schema.schema);
}
process.stdout.write(JSON.stringify(out));
