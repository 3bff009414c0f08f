/// The first `count` elements of `sequence` (fewer when it ends first): the feeds and
/// deliveries the record tests read never end on their own.
func firstElements<S: AsyncSequence>(_ count: Int, of sequence: S) async throws -> [S.Element] {
    var taken: [S.Element] = []
    guard count > 0 else { return taken }
    for try await element in sequence {
        taken.append(element)
        if taken.count == count { break }
    }
    return taken
}
