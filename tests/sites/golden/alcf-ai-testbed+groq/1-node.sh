# skipped: GroqCard: GroqFlow proof point resnet50.py (inference, batch 1) runs on one GroqChip (GroqFlow chooses), not 8
