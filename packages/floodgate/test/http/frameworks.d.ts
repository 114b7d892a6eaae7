// The second major versions tested side by side, installed under aliases.
declare module 'express4' {
  import express from 'express';
  export default express;
}
declare module 'koa3' {
  import Koa from 'koa';
  export default Koa;
}
declare module 'fastify4' {
  import Fastify from 'fastify';
  export default Fastify;
}
