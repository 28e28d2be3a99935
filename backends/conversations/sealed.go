package conversations

import (
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Encryption at rest over a Store: a conversation's metadata is sealed
// under the conversation's data key, each item under its own, made here
// and handed to the Store wrapped beside the row. Every Store gets this
// layer, so none holds a plaintext or repeats the crypto.

// Sealed fields, bound into each ciphertext.
const (
	fieldMetadata = "metadata"
	fieldItem     = "item"
)

// sealOverhead is what sealing adds to an item.
const sealOverhead = envelope.SealOverhead

func (s *Service) sealConversation(r Row, metadata []byte) (Row, error) {
	dk, wrapped, err := s.keys.NewDataKey(r.ID)
	if err != nil {
		return Row{}, fmt.Errorf("conversations: seal %s: %w", r.ID, err)
	}
	r.Metadata, r.Key = dk.Seal(fieldMetadata, metadata), wrapped
	return r, nil
}

// resealMetadata seals metadata under r's existing data key.
func (s *Service) resealMetadata(r Row, metadata []byte) ([]byte, error) {
	dk, err := s.keys.Unwrap(r.ID, r.Key)
	if err != nil {
		return nil, fmt.Errorf("conversations: seal %s: %w", r.ID, err)
	}
	return dk.Seal(fieldMetadata, metadata), nil
}

func (s *Service) openMetadata(r Row) ([]byte, error) {
	dk, err := s.keys.Unwrap(r.ID, r.Key)
	if err != nil {
		return nil, fmt.Errorf("conversations: open %s: %w", r.ID, err)
	}
	b, err := dk.Open(fieldMetadata, r.Metadata)
	if err != nil {
		return nil, fmt.Errorf("conversations: open %s: %w", r.ID, err)
	}
	return b, nil
}

// sealItems seals normalized items (each with an id) of conversation id.
func (s *Service) sealItems(id string, items [][]byte) ([]ItemRow, error) {
	out := make([]ItemRow, len(items))
	for i, it := range items {
		itemID := gjson.GetBytes(it, "id").Str
		dk, wrapped, err := s.keys.NewDataKey(ItemKeyID(id, itemID))
		if err != nil {
			return nil, fmt.Errorf("conversations: seal item of %s: %w", id, err)
		}
		out[i] = ItemRow{ID: itemID, Body: dk.Seal(fieldItem, it), Key: wrapped}
	}
	return out, nil
}

func (s *Service) openItem(id string, r ItemRow) ([]byte, error) {
	dk, err := s.keys.Unwrap(ItemKeyID(id, r.ID), r.Key)
	if err != nil {
		return nil, fmt.Errorf("conversations: open item of %s: %w", id, err)
	}
	b, err := dk.Open(fieldItem, r.Body)
	if err != nil {
		return nil, fmt.Errorf("conversations: open item of %s: %w", id, err)
	}
	return b, nil
}
