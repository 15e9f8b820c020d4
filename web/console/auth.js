// OIDC sign-in for a public browser client: authorization code + PKCE (S256) against the
// issuer named by /console/config.json. The token lives in sessionStorage (this tab only) and
// is sent to the API as a bearer token; nothing is stored in cookies or localStorage.

const TOKEN_KEY = 'sandgate.token';
const PENDING_KEY = 'sandgate.signin';

let config = { issuer: '', client_id: '', scopes: [] };
let onExpired = () => {};

const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');

function randomString(n = 32) {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

async function challengeOf(verifier) {
  if (!window.isSecureContext || !crypto.subtle) {
    throw new Error('Sign-in needs a secure context: open the console over https or on localhost.');
  }
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  return b64url(new Uint8Array(digest));
}

/** The unverified claims of a JWT (the gateway verifies it; the console only reads exp). */
function jwtClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const bin = atob(part + '='.repeat((4 - (part.length % 4)) % 4));
    return JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0))));
  } catch {
    return {};
  }
}

async function discover() {
  const url = `${config.issuer}/.well-known/openid-configuration`;
  let res;
  try {
    res = await fetch(url, { headers: { Accept: 'application/json' } });
  } catch (e) {
    throw new Error(`Could not reach the issuer's discovery document at ${url} (${e.message}). A cross-origin issuer must allow this origin (CORS).`);
  }
  if (!res.ok) throw new Error(`The issuer's discovery document at ${url} answered ${res.status}.`);
  return res.json();
}

function redirectURI() {
  return location.origin + location.pathname;
}

function stored() {
  try {
    return JSON.parse(sessionStorage.getItem(TOKEN_KEY) ?? 'null');
  } catch {
    return null;
  }
}

export const auth = {
  configure(cfg, expired) {
    config = cfg;
    onExpired = expired;
  },

  configured: () => Boolean(config.issuer && config.client_id),
  issuer: () => config.issuer,

  /** The stored token record {value, exp, claims} or null. */
  current: () => stored(),

  /** The bearer token, or null (and the expiry callback fires) when it is missing or expired. */
  token() {
    const t = stored();
    if (!t) return null;
    if (t.exp && Date.now() / 1000 > t.exp - 5) {
      this.expire('Your sign-in expired. Sign in again to continue where you were.');
      return null;
    }
    return t.value;
  },

  /** Drops the token and tells the app, which shows the sign-in screen on the same route. */
  expire(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    onExpired(message);
  },

  signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
  },

  /** Sends the browser to the issuer; route (a #/ hash) is restored after the callback. */
  async signIn(route) {
    const d = await discover();
    const verifier = randomString(48);
    const pending = { state: randomString(), nonce: randomString(), verifier, route, redirect: redirectURI() };
    const q = new URLSearchParams({
      response_type: 'code',
      client_id: config.client_id,
      redirect_uri: pending.redirect,
      scope: (config.scopes?.length ? config.scopes : ['openid']).join(' '),
      state: pending.state,
      nonce: pending.nonce,
      code_challenge: await challengeOf(verifier),
      code_challenge_method: 'S256',
    });
    sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
    location.assign(`${d.authorization_endpoint}?${q}`);
  },

  /**
   * Finishes a sign-in when the page is the issuer's redirect (?code=…&state=…). Returns the
   * route to restore, or null when this load is not a callback. Throws with a readable message
   * when the issuer refused or the exchange failed.
   */
  async handleCallback() {
    const params = new URLSearchParams(location.search);
    if (!params.has('code') && !params.has('error')) return null;
    const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? 'null');
    sessionStorage.removeItem(PENDING_KEY);
    const route = pending?.route || '#/sessions';
    history.replaceState(null, '', location.pathname + route); // the code must not linger in the URL
    if (params.has('error')) {
      throw new Error(`The issuer refused the sign-in: ${params.get('error')}${params.has('error_description') ? ` (${params.get('error_description')})` : ''}.`);
    }
    if (!pending || pending.state !== params.get('state')) {
      throw new Error('The sign-in answer does not match a sign-in started in this tab. Start again.');
    }
    const d = await discover();
    const res = await fetch(d.token_endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code: params.get('code'),
        redirect_uri: pending.redirect,
        client_id: config.client_id,
        code_verifier: pending.verifier,
      }),
    });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) {
      throw new Error(`The issuer's token endpoint refused the code: ${body.error ?? res.status}${body.error_description ? ` (${body.error_description})` : ''}.`);
    }
    // The gateway verifies OIDC ID tokens (aud = its configured audiences); prefer the ID token.
    const value = body.id_token || body.access_token;
    if (!value) throw new Error('The token endpoint answered without a token.');
    const claims = jwtClaims(value);
    if (claims.nonce && claims.nonce !== pending.nonce) throw new Error('The ID token does not carry this sign-in\'s nonce.');
    const exp = claims.exp ?? (body.expires_in ? Math.floor(Date.now() / 1000) + Number(body.expires_in) : 0);
    sessionStorage.setItem(TOKEN_KEY, JSON.stringify({ value, exp, claims }));
    return route;
  },
};
