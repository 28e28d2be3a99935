// What the scripts share: the model under test, the schema every
// structured-output helper is given, and the way each step is recorded.
//
// Each script runs its steps against the gateway named by OPENAI_BASE_URL
// (with OPENAI_API_KEY) on the model SWITCHYARD_MODEL and prints one JSON
// object: step name -> what the step saw, or {"error": ...} when it threw.
// e2e/npm_test.go (TestNPMSDKs) asserts on it; the scripts assert nothing
// themselves, so a failure shows what the SDK got.
import { z } from 'zod';

export const model = process.env.SWITCHYARD_MODEL;
export const baseURL = process.env.OPENAI_BASE_URL;
export const apiKey = process.env.OPENAI_API_KEY;
if (!model || !baseURL || !apiKey) {
  console.error('set SWITCHYARD_MODEL, OPENAI_BASE_URL and OPENAI_API_KEY');
  process.exit(2);
}

// Event is the structured-output schema: nested object, array, enum,
// integer and a nullable member, the shapes strict mode allows.
export const Event = z.object({
  name: z.string(),
  date: z.string(),
  participants: z.array(z.string()),
  priority: z.enum(['low', 'high']),
  venue: z.object({ city: z.string(), capacity: z.number().int() }),
  notes: z.string().nullable(),
});

// valid says whether v is an Event, as zod itself checks it (not only as
// the SDK's helper did).
export function valid(v) {
  const r = Event.safeParse(v);
  return r.success ? true : r.error.message;
}

// errorOf keeps what a failure shows: the API error's status and body,
// or the exception's name and message.
function errorOf(e) {
  return {
    name: e?.constructor?.name ?? typeof e,
    message: String(e?.message ?? e),
    status: e?.status ?? e?.statusCode,
    body: e?.error ?? e?.responseBody,
    cause: e?.cause ? String(e.cause?.message ?? e.cause) : undefined,
  };
}

// run runs each step in turn (so the gateway's logs read in order) and
// prints the results as one JSON line.
export async function run(steps) {
  const out = {};
  for (const [name, step] of Object.entries(steps)) {
    const start = Date.now();
    try {
      out[name] = await step();
    } catch (e) {
      out[name] = { error: errorOf(e) };
    }
    // On stderr, which the test shows when it fails: where the time went.
    console.error(`${name}: ${Date.now() - start} ms`);
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
