"""SoRFT stage 1: rejection-sampled supervised fine-tuning."""
