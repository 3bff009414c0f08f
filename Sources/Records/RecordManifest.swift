// The value under an entity's manifest key (FORMAT.md, "Keys"): the names of the indexes
// built for it, and, for each index a relationship keeps, what its entries refer to, so that
// a check that knows no record type (`Store.checkIndexEntries`, `strata verify`) can follow
// them to the records they name. An entity without relationships keeps the first form of
// the manifest, a plain array of names, byte for byte.
import StrataContexts

/// What an entity's manifest lists.
struct RecordManifest: Codable {
    /// The built indexes' names, sorted.
    var indexes: [String]
    /// What the entries of each relationship index name, by index name.
    var references: [ManifestReference]

    /// The manifest of an entity whose built indexes are `built`, among `declared`.
    init<R: Record>(indexes built: Set<String>, declared: [RecordIndex<R>]) {
        indexes = built.sorted()
        references = declared.compactMap { index in built.contains(index.name) ? index.reference : nil }.sorted { $0.index < $1.index }
    }

    /// The manifest in `bytes`, in either form.
    init(_ bytes: [UInt8]) throws {
        // Version byte, then the root's tag: an array is the first form.
        if bytes.count > 1, bytes[1] == RecordBytes.Tag.array.rawValue {
            self.init(indexes: try RecordDecoder().decode([String].self, from: bytes), references: [])
        } else {
            self = try RecordDecoder().decode(RecordManifest.self, from: bytes)
        }
    }

    private init(indexes: [String], references: [ManifestReference]) {
        self.indexes = indexes
        self.references = references
    }

    func encoded() throws -> [UInt8] {
        try references.isEmpty ? RecordEncoder().encode(indexes) : RecordEncoder().encode(self)
    }
}

/// What the entries of a relationship's index refer to: after the index's prefix, an id of
/// a record of `entity` (optionally behind a byte saying whether there is one), then the
/// id of the record that refers to it.
struct ManifestReference: Codable, Sendable, Equatable {
    /// The index's name.
    var index: String
    /// The entity of the records referred to.
    var entity: String
    /// How many bytes an id of that entity takes in an entry; 0 when it is escaped and
    /// ended (`ForeignKey`).
    var idWidth: Int
    /// Whether an entry's id comes after `01` (`00` then ends it: no record referred to).
    var optional: Bool
    /// Whether a reference to no record is allowed: the delete rule of the referred-to
    /// side is `.noAction`.
    var mayDangle: Bool
}
