package org.mqfs.spark;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;

import com.github.luben.zstd.ZstdInputStream;
import net.jpountz.lz4.LZ4FrameInputStream;

/**
 * Compressed bodies as a consumer gets them (store/format/compression.py, the reference):
 * SYSFLAG 0x1 says the stored body is compressed, bits 0x700 how (1 LZ4, 2 ZSTD, 3 or 0
 * ZLIB), each stream as the Java compressors write it, frames one after another. The codecs
 * are lz4-java's and zstd-jni's, jars every Spark ships. A stream that is damaged, cut short
 * or inflates past LIMIT is a damaged record: Damaged names why.
 */
final class Inflate {
    static final int LIMIT = 256 << 20;  // = compression.INFLATE_LIMIT

    private Inflate() {
    }

    /** Why a stored body does not inflate. */
    static final class Damaged extends Exception {
        Damaged(String why) {
            super(why);
        }
    }

    /** The body of a record with SYSFLAG `sysFlag` (0x1 set) whose stored body is `data`
     * (an empty one as it is, as compression.inflate). */
    static byte[] body(byte[] data, int sysFlag, long where) throws Damaged {
        int kind = sysFlag & 0x700;
        String name = kind == 0x100 ? "lz4" : kind == 0x200 ? "zstd" : kind == 0 || kind == 0x300 ? "zlib"
                : "type " + (kind >> 8);
        String what = "the " + name + " body of the record at CommitLog offset " + where;
        try {
            if (data.length == 0) {  // RocketMQ's decode inflates no empty body
                return data;
            }
            return switch (kind) {
                case 0, 0x300 -> zlib(data);
                case 0x100 -> stream(new LZ4FrameInputStream(new ByteArrayInputStream(data)));
                case 0x200 -> stream(new ZstdInputStream(new ByteArrayInputStream(data)));
                default -> throw new Damaged(what + " has a compression RocketMQ does not know (SYSFLAG 0x"
                        + Integer.toHexString(sysFlag) + ")");
            };
        } catch (Damaged e) {
            throw e.getMessage().startsWith("the ") ? e : new Damaged(what + " " + e.getMessage());
        } catch (IOException | DataFormatException | RuntimeException e) {
            throw new Damaged(what + " does not inflate: " + e);
        }
    }

    /** zlib streams one after another (Python's decompressobj loop), each to its end. */
    private static byte[] zlib(byte[] data) throws DataFormatException, Damaged {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] chunk = new byte[64 << 10];
        int pos = 0;
        do {
            Inflater inflater = new Inflater();
            try {
                inflater.setInput(data, pos, data.length - pos);
                while (!inflater.finished()) {
                    int n = inflater.inflate(chunk);
                    if (n == 0 && (inflater.needsInput() || inflater.needsDictionary())) {
                        throw new Damaged("is cut short (the compressed stream does not end)");
                    }
                    grow(out, chunk, n);
                }
                pos = data.length - inflater.getRemaining();
            } finally {
                inflater.end();
            }
        } while (pos < data.length);
        return out.toByteArray();
    }

    private static byte[] stream(InputStream in) throws IOException, Damaged {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] chunk = new byte[64 << 10];
        try (in) {
            for (int n; (n = in.read(chunk)) >= 0; ) {
                grow(out, chunk, n);
            }
        }
        return out.toByteArray();
    }

    private static void grow(ByteArrayOutputStream out, byte[] chunk, int n) throws Damaged {
        out.write(chunk, 0, n);
        if (out.size() > LIMIT) {
            throw new Damaged("inflates past " + LIMIT + " bytes");
        }
    }
}
