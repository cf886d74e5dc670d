"""A contrastive text embedder: one BERT encoder per channel of a text (title, description,
examples, exclusions) with LoRA and gradient checkpointing, a mixture-of-experts fusion of
the channels and a projection head, trained with InfoNCE over positives and negatives."""
