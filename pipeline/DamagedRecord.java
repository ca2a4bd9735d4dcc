package org.mqfs.spark;

/** A record failed its checks: the message names its file and offsets, as the Python
 * reader's DamagedRecord does (the CLI's one-line errors find it by its name). */
final class DamagedRecord extends RuntimeException {
    DamagedRecord(String message) {
        super(message);
    }
}
