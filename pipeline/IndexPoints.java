package org.mqfs.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.NotDirectoryException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * store/integrity/index_points.py in the task: the CommitLog offsets the store's indexes point
 * at (every ConsumeQueue unit's and IndexFile entry's, read from the units and entries, never
 * from an IndexFile header), the resync's witness after a lost header (docs/format.md, "Resync
 * after damage"). Read only when a task meets such damage, once per CommitLog file: a read
 * that meets none reads no index.
 */
final class IndexPoints {
    private static final int UNIT_SIZE = 20;  // offset int64, size int32, tags code int64
    private static final int PRE_BLANK_SIZE = 0x7FFFFFFF;  // consume_queue.PRE_BLANK: below the head
    private static final int INDEX_HEADER = 40;
    private static final int SLOT_SIZE = 4;
    private static final int ENTRY_SIZE = 20;  // hash int32, offset int64, time diff int32, prev int32

    private final Path root;
    private final int slots;
    private final Map<Long, long[]> files = new HashMap<>();  // a CommitLog file's start -> its points
    private long reach = -1;  // the highest offset any index points at (-1: none)

    IndexPoints(String root, int slots) {
        this.root = Path.of(root);
        this.slots = slots;
    }

    /** Whether a record the search found at `offset` (in the CommitLog file of `size` bytes
     * starting at `fileFrom`) may be taken: an index points at it, or no index reaches it. */
    boolean accepts(long offset, long fileFrom, long size) {
        long[] points = files.computeIfAbsent(fileFrom, from -> read(from, from + size));
        return offset > reach || Arrays.binarySearch(points, offset) >= 0;
    }

    private long[] read(long lo, long hi) {
        Points found = new Points(lo, hi);
        Path queues = root.resolve("consumequeue");
        for (Path topic : names(queues)) {
            for (Path queue : names(topic)) {
                for (Path file : names(queue)) {
                    ByteBuffer b = map(file);
                    for (int at = 0; at + UNIT_SIZE <= b.capacity(); at += UNIT_SIZE) {
                        int size = b.getInt(at + 8);
                        if (size > 0 && size != PRE_BLANK_SIZE) {
                            found.add(b.getLong(at));
                        }
                    }
                }
            }
        }
        long start = INDEX_HEADER + (long) slots * SLOT_SIZE;
        for (Path file : names(root.resolve("index"))) {
            ByteBuffer b = map(file);
            for (long at = start; at + ENTRY_SIZE <= b.capacity(); at += ENTRY_SIZE) {
                int hash = b.getInt((int) at);
                long phy = b.getLong((int) at + 4);
                if (hash != 0 || phy != 0) {
                    found.add(phy);
                }
            }
        }
        return found.sorted();
    }

    /** The points of one CommitLog file's range, and the highest point of all on the way. */
    private final class Points {
        private final long lo;
        private final long hi;
        private long[] values = new long[1024];
        private int n;

        Points(long lo, long hi) {
            this.lo = lo;
            this.hi = hi;
        }

        void add(long offset) {
            reach = Math.max(reach, offset);
            if (offset >= lo && offset < hi) {
                if (n == values.length) {
                    values = Arrays.copyOf(values, n * 2);
                }
                values[n++] = offset;
            }
        }

        long[] sorted() {
            long[] out = Arrays.copyOf(values, n);
            Arrays.sort(out);
            return out;
        }
    }

    /** The entries of a directory of the store, sorted; none when it is not there or is no
     * directory. A link is refused, as safefs refuses it. */
    private static List<Path> names(Path dir) {
        List<Path> out = new ArrayList<>();
        refuseLink(dir);
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
            entries.forEach(out::add);
        } catch (NoSuchFileException | NotDirectoryException e) {
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        out.sort(null);
        return out;
    }

    /** A file's bytes, read-only; none when it is not there or is a directory. */
    private static ByteBuffer map(Path file) {
        refuseLink(file);
        if (Files.isDirectory(file, LinkOption.NOFOLLOW_LINKS)) {
            return ByteBuffer.allocate(0);
        }
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)) {
            return ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
        } catch (NoSuchFileException e) {
            return ByteBuffer.allocate(0);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void refuseLink(Path p) {
        if (Files.isSymbolicLink(p)) {
            throw new IllegalStateException("mqfs: " + p + " is a link in the store; refusing to follow it");
        }
    }
}
