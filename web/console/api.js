// The public REST API (openapi.yaml), called with the signed-in bearer token. Failures become
// ApiError carrying the RFC 9457 problem: `detail` is the message, `type` the stable class.

import { auth } from './auth.js';

export class ApiError extends Error {
  constructor(status, p = {}) {
    super(p.detail || p.title || `HTTP ${status}`);
    this.status = status;
    this.type = p.type ?? '';
    this.title = p.title ?? '';
    this.errors = p.errors ?? [];
    this.requestId = p.request_id ?? '';
  }
}

async function problemOf(res) {
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    return { title: res.statusText || `HTTP ${res.status}`, detail: text.trim().slice(0, 500) };
  }
}

const unauthenticated = {
  type: 'https://sandgate.dev/problems/unauthenticated',
  title: 'Unauthenticated',
  detail: 'You are not signed in.',
};

/** Encodes a workspace path for /files/{path}: each segment escaped, slashes kept. */
export const filePath = (p) => p.split('/').filter(Boolean).map(encodeURIComponent).join('/');

/**
 * Sends one request and returns the Response when it succeeded. opts: json (a body to
 * encode), body (raw bytes), query (an object; empty values are dropped), signal, accept
 * (default JSON), headers (more), keepalive (outlives the page).
 */
export async function send(method, path, { json, body, query, signal, accept, headers: extra, keepalive } = {}) {
  const token = auth.token();
  if (!token) throw new ApiError(401, unauthenticated);
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query ?? {})) if (v !== '' && v != null) url.searchParams.set(k, v);
  const headers = { Authorization: `Bearer ${token}`, Accept: accept ?? 'application/json, application/problem+json', ...extra };
  if (json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(json);
  } else if (body !== undefined) {
    headers['Content-Type'] = 'application/octet-stream';
  }
  let res;
  try {
    res = await fetch(url, { method, headers, body, signal, keepalive });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { title: 'Network error', detail: `The gateway could not be reached: ${e.message}` });
  }
  if (res.ok) return res;
  const p = await problemOf(res);
  if (res.status === 401) auth.expire(p.detail ? `Signed out: ${p.detail}` : 'Your sign-in is no longer accepted.');
  throw new ApiError(res.status, p);
}

/** Like send, and decodes the JSON answer. */
export async function call(method, path, opts) {
  const res = await send(method, path, opts);
  return res.status === 204 ? null : res.json();
}

export const get = (path, query, signal) => call('GET', path, { query, signal });

let profileCache = null;
/** GET /v1/profiles, cached for a minute (profiles change only with the configuration). */
export async function profiles(signal) {
  if (!profileCache || Date.now() - profileCache.at > 60_000) {
    const { profiles: list } = await get('/v1/profiles', null, signal);
    profileCache = { at: Date.now(), list };
  }
  return profileCache.list;
}

export const profileMap = async (signal) => new Map((await profiles(signal)).map((p) => [p.name, p]));
