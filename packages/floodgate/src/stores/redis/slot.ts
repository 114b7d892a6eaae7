/** CRC16-CCITT (XMODEM) table, the checksum Redis Cluster hashes keys with. */
const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  TABLE[i] = crc;
}

/**
 * The cluster slot of a hash tag's content, over its UTF-8 bytes. Every storage key of one user key is
 * `<prefix>:{<encoded key>}:<policy>`, and the encoded key never holds a brace, so its slot is this.
 */
export function hashSlot(tag: string): number {
  let crc = 0;
  for (let i = 0; i < tag.length; i++) {
    const code = tag.charCodeAt(i);
    if (code < 0x80) {
      crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >>> 8) ^ code) & 0xff] as number);
    } else {
      for (const byte of Buffer.from(tag.slice(i), 'utf8')) {
        crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >>> 8) ^ byte) & 0xff] as number);
      }
      break;
    }
  }
  return crc & 0x3fff;
}
