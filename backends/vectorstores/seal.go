package vectorstores

import (
	"context"
	"strconv"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Encryption at rest of the chunks, above the Store: each attach
// generation of a file has a data key of its own (bound to chunkKeyID),
// made when its indexing starts and handed to the Store wrapped; each
// chunk's text is sealed under it, bound to its place in the file
// (chunkField). A Store never sees a plaintext chunk or a key-encryption
// key.

// chunkKeyID names the data key sealing the chunks of one attach
// generation of a file to a store: detaching the file, deleting the store
// or a failed indexing deletes it, and with it every chunk, at once.
func chunkKeyID(storeID, fileID string, gen int64) string {
	return storeKeyPrefix(storeID) + fileID + "/" + strconv.FormatInt(gen, 10)
}

// storeKeyPrefix starts the ids of every data key of store storeID.
func storeKeyPrefix(storeID string) string { return "vsf:" + storeID + "/" }

// chunkField binds a sealed chunk to its place in the file, so chunks
// cannot be reordered either.
func chunkField(seq int64) string { return "chunk:" + strconv.FormatInt(seq, 10) }

// storeKeys are a store's chunk data keys, wrapped, unwrapped on first use.
type storeKeys struct {
	store   Store
	storeID string
	ring    *envelope.Keyring
	wrapped map[FileGen][]byte
	keys    map[FileGen]*envelope.DataKey
}

// chunkKeys reads the wrapped data keys of store id.
func (s *Service) chunkKeys(ctx context.Context, id string) (*storeKeys, error) {
	w, err := s.store.ChunkKeys(ctx, id)
	if err != nil {
		return nil, err
	}
	return &storeKeys{store: s.store, storeID: id, ring: s.keys, wrapped: w, keys: map[FileGen]*envelope.DataKey{}}, nil
}

// open decrypts a sealed chunk of generation fg. A key missing from those
// read before the scan is of a file whose indexing completed since: it is
// read now. An error wrapping envelope.ErrNoKey: the generation's key is
// gone (detached since the scan began).
func (k *storeKeys) open(ctx context.Context, fg FileGen, field string, sealed []byte) ([]byte, error) {
	dk := k.keys[fg]
	if dk == nil {
		w, ok := k.wrapped[fg]
		if !ok {
			var err error
			if w, err = k.store.ChunkKey(ctx, k.storeID, fg); err != nil {
				return nil, err
			}
		}
		var err error
		if dk, err = k.ring.Unwrap(chunkKeyID(k.storeID, fg.FileID, fg.Gen), w); err != nil {
			return nil, err
		}
		k.keys[fg] = dk
	}
	return dk.Open(field, sealed)
}
