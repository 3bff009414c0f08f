// Segment files in the log's directory: their names, and the create / recycle / release
// steps, each followed by a directory fsync (FORMAT.md, "Segment files").
//
// Names:  wal-<sequence, 16 hex digits>.seg   a segment of the log
//         wal-<sequence>.seg.tmp              a segment being created (removed at open)
//         wal-spare-<old sequence>.seg        a released segment kept for reuse
// A segment gets its name only after its header is written and synced (SegmentHeader.swift).
import StrataFileIO

struct SegmentFiles {
    let fileSystem: any FileSystem
    let directory: String

    static let prefix = "wal-"
    static let sparePrefix = "wal-spare-"
    static let suffix = ".seg"

    func path(ofSegment sequence: UInt64) -> String {
        joinPath(directory, Self.prefix + hex16(sequence) + Self.suffix)
    }

    /// The sequence number a segment file name carries, or nil for any other name.
    static func sequence(fromName name: String) -> UInt64? {
        guard name.hasPrefix(prefix), !name.hasPrefix(sparePrefix), name.hasSuffix(suffix) else { return nil }
        let digits = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard digits.count == 16 else { return nil }
        return UInt64(digits, radix: 16)
    }

    /// The directory's segments (sorted by sequence), spares, and leftover temporary files.
    func list() throws -> (segments: [(sequence: UInt64, path: String)], spares: [String], temporaries: [String]) {
        var segments: [(UInt64, String)] = []
        var spares: [String] = []
        var temporaries: [String] = []
        for name in try fileSystem.contentsOfDirectory(directory) {
            if let sequence = Self.sequence(fromName: name) {
                segments.append((sequence, joinPath(directory, name)))
            } else if name.hasPrefix(Self.sparePrefix) && name.hasSuffix(Self.suffix) {
                spares.append(joinPath(directory, name))
            } else if name.hasPrefix(Self.prefix) && name.hasSuffix(Self.suffix + ".tmp") {
                temporaries.append(joinPath(directory, name))
            }
        }
        return (segments.sorted { $0.0 < $1.0 }, spares, temporaries)
    }

    /// Makes the segment `header.sequence`: reuses `spare` when given (its old frames carry
    /// another salt and never verify), else creates and preallocates a new file. The header
    /// is written and synced before the file gets its segment name; the directory is synced
    /// after. Returns the open handle.
    func create(_ header: SegmentHeader, reusing spare: String?) throws -> any OpenFile {
        let temporary = path(ofSegment: header.sequence) + ".tmp"
        if let spare {
            try fileSystem.rename(spare, to: temporary)
        }
        let handle = try fileSystem.open(temporary, options: [.write, .create])
        do {
            if try handle.size() < Int64(header.capacityBytes) {
                try handle.allocate(offset: 0, length: Int64(header.capacityBytes))
            }
            try handle.write(header.encoded(), at: 0)
            try handle.sync()
            try fileSystem.rename(temporary, to: path(ofSegment: header.sequence))
            try fileSystem.syncDirectory(directory)
        } catch {
            try? handle.close()
            throw error
        }
        return handle
    }

    /// Releases a segment that recovery no longer needs: renamed to a spare when fewer than
    /// `maxSpares` exist, else removed; then the directory is synced.
    func release(_ sequence: UInt64, spareCount: Int, maxSpares: Int) throws -> String? {
        let source = path(ofSegment: sequence)
        var spare: String?
        if spareCount < maxSpares {
            let destination = joinPath(directory, Self.sparePrefix + hex16(sequence) + Self.suffix)
            try fileSystem.rename(source, to: destination)
            spare = destination
        } else {
            try fileSystem.removeFile(source)
        }
        try fileSystem.syncDirectory(directory)
        return spare
    }
}

func hex16(_ value: UInt64) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 16 - digits.count) + digits
}
