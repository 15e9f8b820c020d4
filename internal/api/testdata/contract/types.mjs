// Generates the TypeScript types a client gets from openapi.yaml with openapi-typescript,
// mapping `format: binary` to Blob as openapi-typescript documents for file bodies, and
// writes them to out/sandgate.d.ts (checked by check.ts; see contract_tools_test.go).
import fs from "node:fs";
import openapiTS, { astToString } from "openapi-typescript";
import ts from "typescript";

const spec = process.argv[2] ?? "../../../../openapi.yaml";
const BLOB = ts.factory.createTypeReferenceNode(ts.factory.createIdentifier("Blob"));
const ast = await openapiTS(new URL(spec, `file://${process.cwd()}/`), {
  transform(schema) {
    if (schema.format === "binary") return BLOB;
    return undefined;
  },
});
fs.mkdirSync("out", { recursive: true });
fs.writeFileSync("out/sandgate.d.ts", astToString(ast));
