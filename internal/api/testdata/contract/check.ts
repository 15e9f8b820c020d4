// Compile-time checks of the types openapi-typescript generates from openapi.yaml
// (types.mjs writes out/sandgate.d.ts). `tsc --noEmit` fails when a line does not hold.
import type { components, paths } from "./out/sandgate";

type File = paths["/v1/sessions/{session_id}/files/{path}"];

// File bodies are bytes (Blob), never JSON: a Uint8Array or a string is not an upload.
type Upload = NonNullable<File["put"]["requestBody"]>["content"]["application/octet-stream"];
export const upload: Upload = new Blob([new Uint8Array([1, 2, 3, 4, 5])]);
// @ts-expect-error a Uint8Array is not the upload type (openapi-fetch would JSON-encode it)
export const notUpload: Upload = new Uint8Array([1, 2, 3, 4, 5]);
// @ts-expect-error nor is a string
export const notUploadText: Upload = "hello";
export const download: File["get"]["responses"][200]["content"]["application/octet-stream"] = new Blob([]);
export const stdin: NonNullable<paths["/v1/tasks/{task_id}/stdin"]["post"]["requestBody"]>["content"]["application/octet-stream"] = new Blob([]);

// Exactly one of command or code, named by the discriminator kind.
type Run = components["schemas"]["RunRequest"];
export const cmd: Run = { kind: "command", command: "uname -a", language: "python" };
export const code: Run = { kind: "code", code: "print(1)", language: "python" };
// @ts-expect-error neither command nor code
export const neither: Run = { profile: "oneshot", language: "python" };
// @ts-expect-error kind names the member given
export const mismatched: Run = { kind: "code", command: "uname -a" };

// Each event of a stream is told apart by its name; output chunks name their stream too.
type Event = components["schemas"]["EventStream"];
export const stdoutEvent: Event = { event: "stdout", id: "3-0", data: { stream: "stdout", offset: 0, data: "hi\n", encoding: "utf-8" } };
// @ts-expect-error a stdout event carries an output chunk, not a task
export const badEvent: Event = { event: "stdout", id: "3-0", data: { id: "t", session_id: "s", profile: "p", operation: "execute_code", status: "running", submitted_at: "" } };

// Seconds are numbers; exit codes are integers or null.
export const wait: NonNullable<components["schemas"]["CommandRequest"]["wait_s"]> = 0.5;
export const exit: components["schemas"]["ExecutionResult"]["exit_code"] = null;
export const exitCode: components["schemas"]["ExecutionResult"]["exit_code"] = 3;

// Every operation declares its errors as problems.
type Problem = components["schemas"]["Problem"];
export const conflict: paths["/v1/sessions"]["post"]["responses"][409]["content"]["application/problem+json"] = {} as Problem;
export const tooLarge: paths["/v1/sessions/{session_id}/commands"]["post"]["responses"][413]["content"]["application/problem+json"] = {} as Problem;
export const internal: paths["/v1/me"]["get"]["responses"][500]["content"]["application/problem+json"] = {} as Problem;
export const unavailable: paths["/v1/runs"]["post"]["responses"][503]["content"]["application/problem+json"] = {} as Problem;
